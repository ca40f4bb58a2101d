"""Integrations with Ray, aiohttp and vLLM. Each imports its dependency inside the
function that needs it; a missing extra says which to install."""

from __future__ import annotations


def install_driver_hooks() -> None:
    """Called when a driver starts: lens_rl's Ray hooks, installed when (and if) Ray is imported."""
    from lens_rl.integrations.ray import install_ray_hooks

    install_ray_hooks()
