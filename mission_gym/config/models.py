"""Typed, validated models of the six environment config files.

Every model forbids unknown keys and is strict about types (a quoted number is an error, an
int where a float is expected is fine); ranges are checked here so the simulation can trust them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

PosFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --- world.yaml -----------------------------------------------------------------------------------
class Arena(_Model):
    width: PosFloat = 200.0
    height: PosFloat = 200.0


class Physics(_Model):
    dt: PosFloat = 0.05
    action_repeat: Annotated[int, Field(ge=1)] = 5
    episode_seconds: PosFloat = 300.0


class Circle(_Model):
    x: float
    y: float
    radius: PosFloat


class Rect(_Model):
    x: float
    y: float
    width: PosFloat
    height: PosFloat
    angle: float = 0.0


class Obstacles(_Model):
    circles: list[Circle] = []
    rects: list[Rect] = []


class ObservationConfig(_Model):
    lidar_rays: Annotated[int, Field(ge=0, le=64)] = 8
    lidar_range: PosFloat = 30.0
    last_seen_horizon: PosFloat = 30.0
    defender_motion: bool = False  # per defender slot: its speed and tag reload while an attacker sees it


class World(_Model):
    arena: Arena = Arena()
    physics: Physics = Physics()
    obstacles: Obstacles = Obstacles()
    observation: ObservationConfig = ObservationConfig()


# --- units.yaml -----------------------------------------------------------------------------------
class UnitType(_Model):
    team: Literal["attacker", "defender"]
    category: Literal["ground", "air"]
    max_speed: PosFloat
    accel: PosFloat
    turn_rate: PosFloat  # deg/s
    radius: PosFloat
    integrity: PosFloat
    tag_damage: NonNegFloat
    sensors: list[str] = []
    altitude_bands: Annotated[int, Field(ge=1, le=8)] = 1


class Degradation(_Model):
    mobility_fraction: Fraction = 0.5
    sensor_fraction: Fraction = 0.3


class Units(_Model):
    command_speed_fraction: Annotated[float, Field(gt=0, le=1)] = 0.8
    degradation: Degradation = Degradation()
    types: dict[str, UnitType]


# --- sensors.yaml ---------------------------------------------------------------------------------
class Sensor(_Model):
    kind: Literal["lidar", "radar", "camera"]
    range: PosFloat
    fov: Annotated[float, Field(gt=0, le=360)]
    rays: Annotated[int, Field(ge=1)] = 1
    range_sigma: NonNegFloat = 0.0
    bearing_sigma: NonNegFloat = 0.0
    requires_los: bool = True


class Sensors(RootModel[dict[str, Sensor]]):
    model_config = ConfigDict(strict=True, frozen=True)


# --- engagement.yaml ------------------------------------------------------------------------------
class Tag(_Model):
    enabled: bool = True
    range: PosFloat = 20.0
    optimal_range: NonNegFloat = 8.0
    min_damage: NonNegFloat = 10.0
    half_angle: Annotated[float, Field(gt=0, le=180)] = 30.0
    cooldown: NonNegFloat = 3.0
    requires_los: bool = True

    @model_validator(mode="after")
    def _ranges(self) -> Tag:
        if self.optimal_range > self.range:
            raise ValueError(f"optimal_range {self.optimal_range} must be <= range {self.range}")
        return self


class Scan(_Model):
    enabled: bool = False
    duration: NonNegFloat = 0.5
    range_multiplier: Annotated[float, Field(ge=1)] = 1.5
    cooldown: NonNegFloat = 5.0


class Capture(_Model):
    time_to_capture: PosFloat = 15.0
    contested: bool = False


class ModeProbs(_Model):
    patrol: Fraction = 0.5
    guard_objective: Fraction = 0.3
    intercept: Fraction = 0.2

    @model_validator(mode="after")
    def _sum_to_one(self) -> ModeProbs:
        total = self.patrol + self.guard_objective + self.intercept
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"mode probabilities must sum to 1 (got {total:g})")
        return self


class DefenderBehaviour(_Model):
    mode_probs: ModeProbs = ModeProbs()
    reaction_delay: Annotated[list[NonNegFloat], Field(min_length=2, max_length=2)] = [0.0, 0.5]
    random_move_prob: Fraction = 0.05
    engage_range: PosFloat = 20.0
    aim_noise: NonNegFloat = 5.0
    memory_seconds: NonNegFloat = 5.0
    guard_radius: NonNegFloat = 20.0
    patrol_speed: Fraction = 0.5
    chase_speed: Fraction = 0.8
    intercept_speed: Fraction = 1.0
    waypoint_tolerance: PosFloat = 3.0

    @model_validator(mode="after")
    def _delay_order(self) -> DefenderBehaviour:
        lo, hi = self.reaction_delay
        if lo > hi:
            raise ValueError(f"reaction_delay must be [low, high] with low <= high (got {self.reaction_delay})")
        return self


class Engagement(_Model):
    tag: Tag = Tag()
    scan: Scan = Scan()
    capture: Capture = Capture()
    defenders: DefenderBehaviour = DefenderBehaviour()


# --- scenario.yaml --------------------------------------------------------------------------------
class Objective(_Model):
    x: float
    y: float
    radius: PosFloat


class Spawn(_Model):
    type: str
    x: float
    y: float
    heading: float = 0.0  # deg
    altitude: Annotated[int, Field(ge=0)] | None = None  # air units default to band 1, ground units to 0


class DefenderSpawn(Spawn):
    waypoints: list[Annotated[list[float], Field(min_length=2, max_length=2)]] = []


class Randomization(_Model):
    objective_jitter: NonNegFloat = 10.0
    attacker_spawn_jitter: NonNegFloat = 5.0
    defender_spawn_jitter: NonNegFloat = 8.0
    waypoint_jitter: NonNegFloat = 10.0
    defender_modes: bool = True
    reaction_delay: bool = True


class Stall(_Model):
    seconds: PosFloat = 30.0
    capture_gain: NonNegFloat = 0.5
    distance_gain: NonNegFloat = 1.0


class Scenario(_Model):
    name: str = "default"
    objective: Objective
    attackers: Annotated[list[Spawn], Field(min_length=1)]
    defenders: list[DefenderSpawn] = []
    randomization: Randomization = Randomization()
    stall: Stall = Stall()


# --- reward.yaml ----------------------------------------------------------------------------------
class OutcomePenalty(_Model):
    stalled: float = -50.0
    timeout: float = -20.0
    all_disabled: float = -100.0


class Reward(_Model):
    capture_progress: float = 2.0
    win_bonus: float = 200.0
    zone_entry: float = 20.0
    distance_potential: float = 0.5
    ring_bonus: float = 5.0
    ring_radii: list[PosFloat] = [80.0, 60.0, 40.0, 25.0]
    spread_formation: float = 0.005
    spread_distance: NonNegFloat = 5.0
    tag_hit: float = 0.2
    defender_disabled: float = 10.0
    time: float = -0.001
    collision: float = -0.5
    integrity_loss: float = -0.1
    unit_disabled: float = -20.0
    detected: float = -0.05
    outcome_penalty: OutcomePenalty = OutcomePenalty()


# The reward terms, in the order of ``info["reward_terms"]`` and of the simulation's term arrays.
REWARD_TERMS: tuple[str, ...] = (
    "capture_progress",
    "win_bonus",
    "zone_entry",
    "distance_potential",
    "ring_bonus",
    "spread_formation",
    "tag_hit",
    "defender_disabled",
    "time",
    "collision",
    "integrity_loss",
    "unit_disabled",
    "detected",
    "outcome_penalty",
)

SECTIONS: tuple[str, ...] = ("world", "scenario", "units", "sensors", "engagement", "reward")


class MissionConfig(BaseModel):
    """The whole environment configuration: one validated model per YAML file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    world: World
    scenario: Scenario
    units: Units
    sensors: Sensors
    engagement: Engagement
    reward: Reward

    #: what a saved game state means: the map and physics, who starts where with what, and what is randomised
    #: (sensing, engagement and reward weights may differ: a curriculum or a user's weights play the same games)
    SCENARIO_SECTIONS: ClassVar[tuple[str, ...]] = ("world", "scenario", "units")

    def scenario_fingerprint(self) -> str:
        """A short hash of :attr:`SCENARIO_SECTIONS` as resolved: two configurations with the same one restore each
        other's saved game states (a states file records its own)."""
        data = {name: getattr(self, name).model_dump(mode="json") for name in self.SCENARIO_SECTIONS}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]
