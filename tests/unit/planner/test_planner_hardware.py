"""The GPU catalog: bundled entries, aliases, user YAML files and unverified marks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenmill.errors import ConfigError
from tokenmill.planner.hardware import GpuCatalog

REQUIRED = (
    "rtx-pro-6000",
    "rtx-pro-6000-max-q",
    "rtx-pro-6000-server",
    "b200",
    "b300",
    "h200",
    "h100",
    "a100-80gb",
    "l40s",
    "rtx-4090",
    "rtx-5090",
    "mi300x",
)


def test_every_required_gpu_is_bundled_with_sources() -> None:
    catalog = GpuCatalog.load()
    for key in REQUIRED:
        gpu = catalog.get(key)
        assert gpu.sources, key
        assert gpu.memory_mib > 0 and gpu.bandwidth_gbs > 0 and gpu.bf16_tflops > 0


def test_reference_numbers_and_unverified_marks() -> None:
    catalog = GpuCatalog.load()
    pro = catalog.get("RTX PRO 6000")
    assert (pro.memory_mib, pro.bandwidth_gbs, pro.bf16_tflops) == (97_887, 1792, 500)  # docs/reference/hardware.md §1
    assert pro.is_unverified("bf16_tflops") and not pro.is_unverified("bandwidth_gbs")
    assert catalog.get("h100").bf16_tflops == 989.4
    assert catalog.get("b300").is_unverified("bandwidth_gbs")


def test_formats_without_tensor_cores_fall_back() -> None:
    catalog = GpuCatalog.load()
    a100 = catalog.get("a100")
    assert a100.matmul_flops("fp8") == a100.matmul_flops("bf16") == 312e12
    h100 = catalog.get("h100")
    assert h100.matmul_flops("fp4") == h100.matmul_flops("fp8") == 1979e12
    assert catalog.get("b200").matmul_flops("fp4") == 9000e12


def test_unknown_gpu_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as err:
        GpuCatalog.load().get("tpu-v5")
    assert "rtx-pro-6000" in str(err.value) and "--gpu-file" in str(err.value)


def test_user_gpus_are_added_and_shadow_bundled_keys(tmp_path: Path) -> None:
    f = tmp_path / "gpus.yaml"
    f.write_text(
        "gpus:\n"
        "  - {key: my-card, name: My Card, aliases: [mine], memory_mib: 49152, bandwidth_gbs: 960, bf16_tflops: 150}\n"
        "  - {key: h100, name: H100 PCIe, memory_mib: 81559, bandwidth_gbs: 2000, bf16_tflops: 756}\n"
    )
    catalog = GpuCatalog.load(f)
    assert catalog.get("MINE").bandwidth_gbs == 960
    assert catalog.get("h100").name == "H100 PCIe"
    with pytest.raises(ConfigError):  # an override brings its own aliases; the SXM ones no longer fit
        catalog.get("h100-sxm")


def test_bad_user_file_names_the_field(tmp_path: Path) -> None:
    f = tmp_path / "gpus.yaml"
    f.write_text("gpus:\n  - {key: x, name: X, memory_mib: -1, bandwidth_gbs: 1, bf16_tflops: 1, speed: 3}\n")
    with pytest.raises(ConfigError) as err:
        GpuCatalog.load(f)
    assert "gpus.0.memory_mib" in str(err.value) and "gpus.0.speed" in str(err.value)
    f.write_text("gpus: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        GpuCatalog.load(f)
    with pytest.raises(ConfigError, match="cannot read"):
        GpuCatalog.load(tmp_path / "missing.yaml")


def test_every_bundled_memory_is_a_driver_report_with_its_source() -> None:
    # SGLang's automatic fraction starts from nvidia-smi memory.total (rocminfo's pool size on AMD), so each
    # entry carries the figure a posted driver report shows, and says where it was posted
    for gpu in GpuCatalog.load():
        sources = " ".join(gpu.sources)
        assert str(gpu.memory_mib) in sources or f"{gpu.memory_mib:,}" in sources, gpu.key
        assert not gpu.is_unverified("memory_mib"), gpu.key


@pytest.mark.parametrize(
    ("key", "mib"),
    [("h100", 81_559), ("h200", 143_771), ("b200", 183_359), ("b300", 275_040), ("rtx-pro-6000", 97_887)],
)
def test_driver_reported_totals(key: str, mib: int) -> None:
    assert GpuCatalog.load().get(key).memory_mib == mib


def test_a_gpu_spec_made_in_code_is_held_to_the_gpu_file_s_rules() -> None:
    """One set of rules: GpuSpec itself validates (it was a plain dataclass beside a pydantic mirror, so a spec
    made in code took a zero bandwidth or an unknown field the file refuses)."""
    from pydantic import ValidationError

    from tokenmill.planner.hardware import GpuSpec

    with pytest.raises(ValidationError, match="bandwidth_gbs"):
        GpuSpec(key="k", name="k", memory_mib=1024, bandwidth_gbs=0, bf16_tflops=1)
    spec = GpuSpec(key="k", name="k", memory_mib=1024, bandwidth_gbs=1, bf16_tflops=1, aliases=["a"])  # type: ignore[arg-type]
    assert spec.aliases == ("a",) and spec.fp8_tflops is None
