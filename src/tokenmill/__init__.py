"""tokenmill: turn a prompt dataset into a completion corpus by driving a fleet of inference servers."""

__version__ = "0.1.0"
__all__ = ["__version__"]
