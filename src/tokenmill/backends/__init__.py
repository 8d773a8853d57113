"""Request/response seams for each server API; the only package that knows HTTP body shapes.

``make_backend(kind, ...)`` returns a :class:`~tokenmill.backends.base.Backend` from the registry; the
dispatcher only calls ``backend.generate(session, server, prompt)``.
"""

from tokenmill.backends import openai, sglang  # noqa: F401  (importing them registers their Backend classes)
from tokenmill.backends.base import Backend, BackendOptions, make_backend, probe_token_ids

__all__ = ["Backend", "BackendOptions", "make_backend", "probe_token_ids"]
