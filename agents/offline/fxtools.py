"""TEMPORARY: the old name of agents.offline.fx, kept only until the tests move to the new
modules (helper D1 deletes it in the same change that updates them)."""

from agents.offline.fx.codegen import *  # noqa: F403
from agents.offline.fx.effects import *  # noqa: F403
from agents.offline.fx.graph_edit import *  # noqa: F403
from agents.offline.fx.ops import *  # noqa: F403
from agents.offline.fx.tracing import *  # noqa: F403
