"""What the recurrent sweep runs: its cases (`SweepCase`, the seed's eight defaults) and
its settings (`SweepConfig`). The sweep (farm.recurrent.sweep) runs them; the report
(farm.recurrent.report) lays them out."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from farm.schedule import Problem

CASE_FIELDS = ("batch", "heads", "value_heads", "time", "latent", "embd")
DEFAULT_EMBDS = (96, 128, 192, 256, 384, 512, 640, 768)
ARTIFACT_NAMES = {
    "markdown_path": "recurrent_scaling.md",
    "csv_path": "recurrent_scaling.csv",
    "json_path": "recurrent_scaling.json",
    "steps_csv_path": "recurrent_scaling_steps.csv",
}


@dataclass(frozen=True)
class SweepCase:
    """One sweep shape: query [batch, heads, time, latent], value [batch, value_heads, time, embd]."""

    name: str
    batch: int
    heads: int
    value_heads: int
    time: int
    latent: int
    embd: int

    def as_dict(self) -> dict:
        return {"name": self.name} | {f: getattr(self, f) for f in CASE_FIELDS}

    def problem(self) -> Problem:
        """The recurrent kernel's problem for this case (B, H, VH, T, L, E)."""
        dims = zip(("B", "H", "VH", "T", "L", "E"), (getattr(self, f) for f in CASE_FIELDS), strict=True)
        return Problem.of(**dict(dims))

    @classmethod
    def parse(cls, text: str) -> SweepCase:
        """`name:B,H,VH,T,L,E` (as given to --case); ValueError naming the bad part."""
        name, sep, dims = text.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"--case {text!r}: expected name:B,H,VH,T,L,E")
        parts = [p.strip() for p in dims.split(",")]
        if len(parts) != 6:
            raise ValueError(f"--case {text!r}: expected 6 dimensions B,H,VH,T,L,E, got {len(parts)}")
        try:
            values = [int(p) for p in parts]
        except ValueError:
            raise ValueError(f"--case {text!r}: dimensions must be integers, got {dims!r}") from None
        case = cls(name.strip(), *values)
        if min(values) < 1:
            raise ValueError(f"--case {text!r}: every dimension must be >= 1")
        if case.value_heads not in (1, case.heads):
            raise ValueError(f"--case {text!r}: VH={case.value_heads} must be 1 or H={case.heads}")
        return case


def default_cases() -> list[SweepCase]:
    return [SweepCase(f"sweep_b1_h8_t64_l64_e{e}", 1, 8, 1, 64, 64, e) for e in DEFAULT_EMBDS]


def long_cases() -> list[SweepCase]:
    """The long-sequence cases (`farm sweep recurrent --long`, opt-in): value heads = heads,
    T = 1024 and 4096, and a batch of 8; the catalog tunes them by default on a GPU."""
    return [
        SweepCase("long_b1_h8_t1024_l64_e768", 1, 8, 8, 1024, 64, 768),
        SweepCase("long_b8_h8_t1024_l64_e256", 8, 8, 8, 1024, 64, 256),
        SweepCase("long_b1_h8_t4096_l64_e768", 1, 8, 8, 4096, 64, 768),
    ]


def merge_cases(base: list[SweepCase], extra: list[SweepCase]) -> list[SweepCase]:
    """`extra` cases replace same-named ones in place, and the rest are appended."""
    merged = {c.name: c for c in base}
    for case in extra:
        merged[case.name] = case
    return list(merged.values())


@dataclass(frozen=True)
class SweepConfig:
    """The sweep's settings; `normalized()` applies the minimums and artifact defaults."""

    warmup: int = 2
    repetitions: int = 4
    extra_repetitions: int = 3
    heavy_min_embd: int = 512
    gpu_util_threshold: float = 25.0
    seed: int = 1337
    allow_cpu: bool = False
    db: str | None = None
    output_dir: str | None = None
    markdown_path: str | None = None
    csv_path: str | None = None
    json_path: str | None = None
    steps_csv_path: str | None = None
    cases: tuple[SweepCase, ...] = field(default_factory=lambda: tuple(default_cases()))

    def normalized(self) -> SweepConfig:
        paths = {}
        if self.output_dir:
            for key, filename in ARTIFACT_NAMES.items():
                if getattr(self, key) is None:
                    paths[key] = str(Path(self.output_dir) / filename)
        return replace(
            self,
            warmup=max(self.warmup, 1),
            repetitions=max(self.repetitions, 1),
            extra_repetitions=max(self.extra_repetitions, 0),
            **paths,
        )
