"""The parameters of a ``stress:`` step (played by harness.scenario.stress), bounded for the loader."""

from __future__ import annotations

from typing import Any, ClassVar, Literal, cast

from pydantic import Field, model_validator

from harness.scenario.fields import AS_DESCRIPTION, WORKER_0, Duration, StepName, Strict, Worker

__all__ = ["Stress", "POINTS", "Point"]

Point = Literal["dispatch", "frame", "snapshot", "accept", "concurrent_stops"]
POINTS: tuple[str, ...] = Point.__args__  # type: ignore[attr-defined]
MAX_SEED = (1 << 63) - 1


class Stress(Strict):
    """Seeded stress of the racing points: rounds of client traffic, each ended by a stop (then a restart) while
    a racing point is widened by a failpoint delay the seed chooses; the schedule is recorded (stress_schedule)."""

    POINTS: ClassVar[tuple[str, ...]] = POINTS
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="the schedule's seed; default the scenario's "
                             "seed, else 0: the same seed plays the same schedule")
    on: Worker = Field(WORKER_0, description="the worker whose listener is stressed (default rank 0, pp 0)")
    clients: int = Field(8, ge=1, le=64, description="the most client threads of a round (the seed picks how many)")
    requests: int = Field(100, ge=1, le=5000, description="requests sent in all, shared among the rounds")
    stops: int = Field(5, ge=1, le=50, description="rounds, each ended by a stop; a restart begins every later one")
    points: list[Point] = Field(default_factory=lambda: cast("list[Point]", list(POINTS)), min_length=1,
                                max_length=len(POINTS),
                                description="the racing points widened, one per round, in an order the seed "
                                "chooses (each at least once when stops >= their number): dispatch (the "
                                "dispatch decision), frame (the frame-completion decision), snapshot (stop's flag "
                                "set and connection snapshot), accept, concurrent_stops (a second stop while the "
                                "first tears down)")
    min_delay: Duration = Field(0.15, gt=0, le=2.0, description="the shortest delay the seed may hold a window")
    max_delay: Duration = Field(0.3, gt=0, le=2.0, description="the longest delay the seed may hold a window")
    timeout: Duration = Field(10.0, gt=0, le=120.0, description="a safety net for each wait of a round")
    as_: StepName | None = Field(None, alias="as", description=AS_DESCRIPTION)

    @model_validator(mode="after")
    def _ordered(self) -> Stress:
        if self.min_delay > self.max_delay:
            raise ValueError(f"min_delay ({self.min_delay}s) is over max_delay ({self.max_delay}s); swap them")
        if len(set(self.points)) != len(self.points):
            raise ValueError(f"points lists one racing point twice: {self.points}")
        return self

    def schedule_params(self) -> dict[str, Any]:
        """What the schedule is a function of, besides the seed."""
        return {"clients": self.clients, "requests": self.requests, "stops": self.stops,
                "points": list(self.points), "min_delay": self.min_delay, "max_delay": self.max_delay}
