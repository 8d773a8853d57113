"""The writer lock's holder record: this process is alive, a reused pid (another start) or a reboot is not, and
a holder on another host cannot be asked (the caller judges by the heartbeat)."""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path

from tokenmill.output.holder import Holder, read_holder
from tokenmill.output.lock import DirLock


def test_the_lock_names_its_holder_and_it_is_alive(tmp_path: Path) -> None:
    lock = DirLock(tmp_path)
    lock.acquire()
    try:
        holder = read_holder(tmp_path / ".lock")
        assert holder is not None and holder.pid == os.getpid() and holder.host == socket.gethostname()
        assert holder.started is not None and holder.alive() is True
    finally:
        lock.release()


def test_a_reused_pid_a_reboot_and_a_dead_pid_are_gone_another_host_is_unknown(tmp_path: Path) -> None:
    me = Holder.me()
    assert me.started is not None
    assert dataclasses.replace(me, started=me.started + 1).alive() is False  # the pid now names a later process
    assert dataclasses.replace(me, boot="another-boot").alive() is False
    assert dataclasses.replace(me, pid=2**22 + 12345).alive() is False
    assert dataclasses.replace(me, host=me.host + "-elsewhere").alive() is None


def test_a_lock_of_an_older_version_names_no_holder(tmp_path: Path) -> None:
    (tmp_path / ".lock").write_text("1234\n")
    assert read_holder(tmp_path / ".lock") is None
    assert read_holder(tmp_path / "missing") is None
