"""The stand-in's bindings package."""
