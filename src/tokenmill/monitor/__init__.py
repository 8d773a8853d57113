"""Watching servers and the client: scrapes, rates, and what is shown or exported from them.

``scrape`` turns one server's ``/metrics`` into a typed snapshot; the rest of the package builds on it.
"""
