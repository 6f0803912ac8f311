"""TRL's tool schemas for the environment_factory tools come from the action models, not from a second text."""

from __future__ import annotations

import pytest

pytest.importorskip("trl", reason="trl is not installed (pip install '.[train]')")

from transformers.utils import get_json_schema

from medagentgym.env_client.actions import tool_schema
from medagentgym.adapters.trl import _TOOLS


@pytest.mark.parametrize("name", sorted(_TOOLS))
def test_trl_tool_schema_carries_the_action_descriptions(name):
    trl_fn = get_json_schema(_TOOLS[name])["function"]  # what TRL renders into the chat template
    ours = tool_schema(name)["function"]
    assert trl_fn["name"] == name and trl_fn["description"] == ours["description"]
    assert set(trl_fn["parameters"]["properties"]) == set(ours["parameters"]["properties"])
    for key, prop in ours["parameters"]["properties"].items():
        assert trl_fn["parameters"]["properties"][key]["description"] == prop["description"]
        assert trl_fn["parameters"]["properties"][key].get("enum") == prop.get("enum")
    assert set(trl_fn["parameters"].get("required", [])) == set(ours["parameters"].get("required", []))
