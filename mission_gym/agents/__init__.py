"""Trained agents as files and as policies to act with: the files that hold no code (the weights as safetensors and
a JSON agent file beside every model, :mod:`~mission_gym.agents.files`), loading an agent to act without unpickling
anything unless ``--trust-pickle`` says so (:mod:`~mission_gym.agents.loading`), and a policy to watch or record
(:mod:`~mission_gym.agents.sources`). It sits below :mod:`mission_gym.ppo` and :mod:`mission_gym.training`, which
saves the files with every model.
"""

from mission_gym.agents.files import NormStats, agent_files, read_agent_file
from mission_gym.agents.loading import (
    MODEL_CHOICE,
    TRUST_PICKLE,
    Agent,
    PickleRefused,
    has_safe_files,
    load_agent,
    model_file,
)
from mission_gym.agents.sources import Policy, PolicySource, load_policy
from mission_gym.agents.spec import AgentSpec

__all__ = [
    "MODEL_CHOICE",
    "TRUST_PICKLE",
    "Agent",
    "AgentSpec",
    "NormStats",
    "PickleRefused",
    "Policy",
    "PolicySource",
    "agent_files",
    "has_safe_files",
    "load_agent",
    "load_policy",
    "model_file",
    "read_agent_file",
]
