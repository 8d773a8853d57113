"""Autotune: the doctor's advice applied to a live fleet, measured, and kept only when it pays.

The loop (``loop``) works on an :class:`~tokenmill.autotune.tuning.Actuator`: a fleet in this process or one
reached through its state directory (``actuators``); it measures each change on the servers' own decode rates
(``measure``) and records what it kept (``tuned``). ``fleet tune`` runs it without a run (``standalone``).
"""
