"""The real accelerator captures in ../shared/fixtures/profiles (README there: provenance and facts)."""

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "profiles"
V100 = FIXTURES / "v100x8-tf-bert-large-squad-mirrored.xplane.pb"
GEMM = FIXTURES / "mi300x-jax-gemm.xplane.pb"
ATTENTION = FIXTURES / "mi300x-jax-attention.xplane.pb"
MANGLED = FIXTURES / "corrupt-utf8-mangled.xplane.pb"
