"""Recipe loading, overrides and validation: every problem is one line naming the key, the value and the fix."""

from __future__ import annotations

import pytest
import yaml

from medagentgym.medcopilot.config import (
    RECIPES_DIR,
    RecipeConfig,
    RecipeError,
    apply_override,
    check_recipe,
    load_recipe,
)

ALL_RECIPES = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    return text


def test_bundled_recipes_exist_for_every_method_and_size():
    for name in ("sft_qwen7b", "sft_qwen14b", "dpo_qwen7b", "dpo_qwen14b", "sft_tiny", "dpo_tiny"):
        assert name in ALL_RECIPES


@pytest.mark.parametrize("name", ALL_RECIPES)
def test_every_recipe_has_the_house_header_and_loads(name):
    text = (RECIPES_DIR / f"{name}.yaml").read_text()
    header = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    assert any(f"train.py recipe={name}" in line for line in header), "header must show the launch command"
    assert any(f"recipe={name} " in line and "=" in line.split(f"recipe={name} ")[1] for line in header), \
        "header must show an override example"
    cfg = load_recipe(name)
    assert cfg.name == name and cfg.method == name.split("_")[0]
    assert cfg.to_dict()["output"]["dir"]


def test_overrides_are_yaml_typed_and_create_sections():
    cfg = load_recipe("sft_tiny", ["trainer.max_steps=2", "trainer.learning_rate=5e-4", "model.lora=null",
                                   "tasks.families=[toy_sql, other]", "output.dir=runs/x",
                                   "reward.weights.format_penalty=0"])
    assert cfg.trainer["max_steps"] == 2 and cfg.trainer["learning_rate"] == 5e-4
    assert cfg.model.lora is None and cfg.tasks.families == ["toy_sql", "other"] and cfg.output.dir == "runs/x"
    assert cfg.reward.weights == {"format_penalty": 0.0}  # the recipe had no reward section: the mapping is new
    cfg = load_recipe("sft_tiny", ["model.lora=null", "model.lora.r=4"])  # re-enable with defaults + r
    assert cfg.model.lora.r == 4 and cfg.model.lora.alpha == 32


def test_resolved_recipe_round_trips_through_yaml(tmp_path):
    cfg = load_recipe("dpo_tiny", [f"output.dir={tmp_path / 'run'}"])
    path = cfg.save()
    assert path == tmp_path / "run" / "recipe.yaml"
    again = load_recipe(path)
    assert again.to_dict() == cfg.to_dict()
    assert list(yaml.safe_load(path.read_text()))[:3] == ["method", "model", "tasks"]


@pytest.mark.parametrize(("override", "expected"), [
    ("modle.name_or_path=x", "unknown key 'modle': did you mean 'model'? valid keys: method, model"),
    ("model.lora.alpah=8", "unknown key 'model.lora.alpah': did you mean 'alpha'?"),
    ("rollout.concurency=2", "did you mean 'concurrency'?"),
    ("model.dtype=bf16", "model.dtype='bf16' is not allowed: did you mean 'bfloat16'?"),
    ("rollout.k=many", "rollout.k='many' has the wrong type: expected int, got str"),
    ("rollout.k=0", "rollout.k=0 is invalid: expected an integer >= 1"),
    ("model.lora.dropout=1.5", "model.lora.dropout=1.5 is invalid: expected a value in [0, 1)"),
    ("tasks.families=toy_sql", "tasks.families='toy_sql' has the wrong type: expected a list of str"),
    ("method=rlhf", "method='rlhf' is not allowed"),
    ("model=qwen", "model='qwen' must be a section"),
    ("output.push_to_hub=justaname", "expected a repo id of the form org/name"),
    ("trainer.output_dir=/tmp/x", "set output.dir instead"),
    ("model.name_or_path.sub=1", "model.name_or_path is 'artifacts/tiny-qwen2', not a section"),
    ("noequals", "is not of the form section.key=value"),
    ("reward.weights.corectness=1", "unknown reward term reward.weights.corectness: did you mean 'correctness'?"),
])
def test_bad_overrides_fail_with_one_helpful_line(override, expected):
    with pytest.raises(RecipeError) as exc:
        load_recipe("sft_tiny", [override])
    assert expected in one_line(exc)


def test_missing_recipe_names_file_and_nearest():
    with pytest.raises(RecipeError) as exc:
        load_recipe("sft_tyni")
    assert "sft_tyni.yaml" in one_line(exc) and "did you mean 'sft_tiny'?" in str(exc.value)
    with pytest.raises(RecipeError, match="nope.yaml"):
        load_recipe("/tmp/definitely/nope.yaml")


def test_bad_yaml_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("method: sft\nmodel: [unclosed\n")
    with pytest.raises(RecipeError) as exc:
        load_recipe(bad)
    assert one_line(exc).startswith(f"{bad}:3: ") and "fix the YAML at that line" in one_line(exc)
    assert "while parsing a flow sequence that starts at line 2" in one_line(exc)
    bad.write_text("method: sft\nmodel:\n  name_or_path: a: b\n")
    with pytest.raises(RecipeError, match=rf"^{bad}:3: mapping values are not allowed here \(column 18\)"):
        load_recipe(bad)
    bad.write_text("- just\n- a list\n")
    with pytest.raises(RecipeError, match="must be a mapping"):
        load_recipe(bad)


def test_required_model_and_default_output_dir():
    with pytest.raises(RecipeError, match="model.name_or_path=''"):
        RecipeConfig.from_dict({"method": "sft"})
    cfg = RecipeConfig.from_dict({"method": "dpo", "model": {"name_or_path": "m"}}, name="mine")
    assert cfg.output.dir == "runs/mine" and cfg.model.lora is None and cfg.tasks.families == ["toy_sql"]


def test_apply_override_in_place():
    data = {"model": {"lora": None}}
    apply_override(data, "model.lora.target_modules=[q_proj, v_proj]")
    assert data == {"model": {"lora": {"target_modules": ["q_proj", "v_proj"]}}}


def test_trainer_args_checks_trl_fields_and_picks_cpu_precision():
    cfg = load_recipe("sft_tiny", ["trainer.max_steps=3", "output.dir=runs/args_check"])
    args = cfg.trainer_args(assistant_only_loss=True)
    assert type(args).__name__ == "SFTConfig" and args.max_steps == 3 and args.assistant_only_loss
    assert args.output_dir == "runs/args_check"
    assert args.use_cpu and not args.bf16  # this machine has no GPU
    assert args.activation_checkpointing is False
    with pytest.raises(RecipeError) as exc:
        load_recipe("sft_tiny", ["trainer.lerning_rate=1e-4"]).trainer_args()
    assert "unknown key 'trainer.lerning_rate': did you mean 'learning_rate'?" in one_line(exc)
    with pytest.raises(RecipeError) as exc:  # a value TRL itself rejects
        load_recipe("dpo_tiny", ["trainer.lr_scheduler_type=bogus"]).trainer_args()
    assert "trl.DPOConfig rejected the trainer section" in one_line(exc)


@pytest.mark.parametrize(("override", "expected"), [
    ("trainer.max_steps=abc", "trainer.max_steps='abc' has the wrong type: trl.GRPOConfig expects int"),
    ("trainer.learning_rate=fast", "trainer.learning_rate='fast' has the wrong type"),
    ("trainer.report_to=7", "trainer.report_to=7 has the wrong type"),
    ("tasks.families=[toy_sql, toy_sqll]", "tasks.families[1]='toy_sqll': unknown task family 'toy_sqll'"),
    ("tasks.families=[toy_sqll]", "did you mean `toy_sql`?"),
])
def test_check_recipe_types_families_before_any_model(override, expected):
    with pytest.raises(RecipeError) as exc:
        check_recipe(load_recipe("grpo_tiny", [override]))
    assert expected in one_line(exc)


def test_check_recipe_per_method(tmp_path):
    args = check_recipe(load_recipe("grpo_tiny", ["trainer.max_steps=5"]))
    assert type(args).__name__ == "GRPOConfig" and args.max_steps == 5
    assert type(check_recipe(load_recipe("ppo_tiny"))).__name__ == "PPOArgs"
    assert type(check_recipe(load_recipe("verifier_tiny"))).__name__ == "VerifierConfig"
    with pytest.raises(RecipeError, match="trainer.max_steps='abc' has the wrong type: expected int"):
        check_recipe(load_recipe("ppo_tiny", ["trainer.max_steps=abc"]))
    with pytest.raises(RecipeError, match="trainer.eval_fraction='half' has the wrong type"):
        check_recipe(load_recipe("verifier_tiny", ["trainer.eval_fraction=half"]))
    # a family declared by family.yaml under tasks.root counts as known
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "family.yaml").write_text("name: mine\nanswer_type: integer\n")
    check_recipe(load_recipe("sft_tiny", [f"tasks.root={tmp_path}", "tasks.families=[mine, toy_sql]"]))
