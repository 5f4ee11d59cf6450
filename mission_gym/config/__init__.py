"""Typed configuration: the default YAML files, their models and the one loader."""

from mission_gym.config.loader import defaults_dir, get_setting, load_config, with_setting, with_settings
from mission_gym.config.models import REWARD_TERMS, SECTIONS, MissionConfig
from mission_gym.config.yaml_io import ConfigError, dump_yaml, parse_yaml, read_yaml, validate

__all__ = [
    "REWARD_TERMS",
    "SECTIONS",
    "ConfigError",
    "MissionConfig",
    "defaults_dir",
    "dump_yaml",
    "get_setting",
    "load_config",
    "parse_yaml",
    "read_yaml",
    "validate",
    "with_setting",
    "with_settings",
]
