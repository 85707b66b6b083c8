"""RunConfig: one frozen, validated description of a run.

Sources, later wins: built-in defaults → workload YAML (`--workload NAME|FILE`) → `--data URI` → `--set a.b=v`.
Every field is reachable as `--set section.key=value`; the keys listed in shared/DESIGN.md are a public contract.
Validation happens once, up front: a bad key, type or value raises UsageError naming it.

schema.py holds the sections, fields, defaults and allowed values; loading.py builds and validates a RunConfig.
"""

from tfbertperf.config.loading import config_from_dict, known_keys, load_config, resolve_workload
from tfbertperf.config.schema import (AUTOTUNE, CHOICES, MINIMUM, WORKLOAD_DIR, DataConfig, EmulateConfig,
                                      ModelConfig,
                                      PipelineConfig, ProfileConfig, RunConfig, RunSection, TrainConfig,
                                      data_home, default_data_dir, parse_window)

__all__ = ["AUTOTUNE", "CHOICES", "MINIMUM", "WORKLOAD_DIR", "DataConfig", "EmulateConfig", "ModelConfig", "PipelineConfig",
           "ProfileConfig", "RunConfig", "RunSection", "TrainConfig", "config_from_dict", "data_home",
           "default_data_dir", "known_keys", "load_config", "parse_window", "resolve_workload"]
