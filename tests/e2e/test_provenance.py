"""What each record came from: the served model, engine, version and flags hash of the server that answered it,
and the input row's own columns, carried into the export on request (simulated servers as processes)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import aiohttp
import orjson

from tests.helpers.cli import read_records, run_cli, write_job
from tokenmill.fleet.simprocs import SimProcess
from tokenmill.monitor.origin import fetch_origin

N = 80


async def origins(urls: list[str]) -> dict[str, dict[str, str | None]]:
    async with aiohttp.ClientSession() as session:
        return {u: (await fetch_origin(session, u)).as_dict() for u in urls}


def test_records_carry_their_servers_origin_and_the_inputs_columns(fleet: list[SimProcess], tmp_path: Path) -> None:
    data = tmp_path / "in.jsonl"
    rows = [
        {
            "id": f"r{i:03d}",
            "prompt": f"Say {i}.",
            "label": ["math", "code"][i % 2],
            "source": "seed",
            "langdetect": "en",
        }
        for i in range(N)
    ]
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", [s.url for s in fleet], data, out)
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    done, _ = read_records(out)
    assert len(done) == N
    expected = asyncio.run(origins([s.url for s in fleet]))
    assert len({o["flags_hash"] for o in expected.values()}) == 2  # two servers started with other settings
    for rec in done:
        assert rec["origin"] == expected[rec["server"]]
        assert rec["origin"]["engine"] == "tokenmill-sim" and rec["origin"]["engine_version"] == "0.5.23"
        assert re.fullmatch(r"[0-9a-f]{16}", rec["origin"]["flags_hash"])
        assert rec["fields"] == {
            "label": ["math", "code"][int(rec["id"][1:]) % 2],
            "source": "seed",
            "langdetect": "en",
        }

    plain = tmp_path / "plain.jsonl"
    assert run_cli("export", str(out), "--format", "specforge", "--to", str(plain)).returncode == 0
    plain_rows = [orjson.loads(line) for line in plain.read_bytes().splitlines()]
    assert all(set(r) == {"id", "conversations", "thinking"} for r in plain_rows)
    kept = tmp_path / "kept.jsonl"
    res = run_cli("export", str(out), "--format", "sharegpt", "--to", str(kept), "--keep-fields", "label,source")
    assert res.returncode == 0, res.stderr
    got = {r["id"]: r for r in map(orjson.loads, kept.read_bytes().splitlines())}
    assert got["r001"]["label"] == "code" and got["r001"]["source"] == "seed" and "langdetect" not in got["r001"]
    clash = run_cli("export", str(out), "--format", "sharegpt", "--to", str(kept), "--keep-fields", "all")
    assert clash.returncode == 0, clash.stderr  # no input column is named like a row field here
