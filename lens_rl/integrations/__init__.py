"""Integrations with Ray, aiohttp and vLLM. Each imports its dependency inside the
function that needs it; a missing extra says which to install."""
