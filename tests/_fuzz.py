"""What the fuzz tests (tests/*/test_fuzz_*.py, issue #31) share: their example
counts and the strategies of random values.

Each fuzz test draws a bounded number of examples (``examples(n)``), the same
ones on every run unless ``KBEAR_HYPOTHESIS_EXPLORE=1`` (see conftest.py); all
of them together add about two minutes to the suite. To fuzz longer, multiply
the counts: ``KBEAR_FUZZ_SCALE=20 KBEAR_HYPOTHESIS_EXPLORE=1 pytest tests/*/test_fuzz_*.py``
(docs/contributing/fuzzing.md).
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

#: multiplies every fuzz test's example count (``KBEAR_FUZZ_SCALE``, default 1)
SCALE = max(1, int(os.environ.get("KBEAR_FUZZ_SCALE", "1") or "1"))


def examples(n: int) -> Any:
    """hypothesis settings for ``n`` examples (times :data:`SCALE`), no deadline, no
    "explain" phase (it traces every line of a failing example: minutes under kbear)."""
    return settings(
        max_examples=n * SCALE,
        deadline=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


#: names as configurations use them, and a few that break things
NAMES = st.sampled_from(["east", "west", "orders", "audit", "g1", "env", "uat", ""]) | st.text(max_size=8)
#: keys of any type a Python mapping (or a YAML file) may hold
KEYS = (
    st.sampled_from(["id", "meta", "rule", "priority", "bootstrap.servers", "linger.ms", "topic.id"])
    | st.text(max_size=6)
    | st.integers(-3, 3)
    | st.booleans()
    | st.none()
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | NAMES
    | st.sampled_from(["${EAST}", "${MISSING}", "$${EAST}", "a${EAST}b", "${", "use cluster east"])
)
#: any JSON-like value, keys of mixed types included
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=16,
)
