"""The flagship recipes train on the paper's in-distribution families with weights, on a GPU stack that resolves,
and ``--dry-run`` refuses a recipe that cannot run as configured (one line each)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from medagentgym.medcopilot.config import RECIPES_DIR, RecipeError, check_recipe, load_recipe
from medagentgym.medcopilot.mixture import mixture_shares, resample
from medagentgym.medcopilot.recipe_checks import ATTENTION_KERNELS, model_shape, vllm_base_model
from medagentgym.tasks import SUITES

REPO = Path(__file__).resolve().parents[2]
QWEN_RECIPES = sorted(p.stem for p in RECIPES_DIR.glob("*_qwen*.yaml"))
ALL_RECIPES = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def test_suites_are_the_papers_columns_and_disjoint():
    assert set(SUITES["id"]) == {"mimic_iii", "eicu", "treqs", "medcalcbench", "medagentbench", "biocoder",
                                 "biodsbench", "ehrshot"}
    assert set(SUITES["ood"]) == {"ehr_seqsql", "ehrcon", "mimic_extract", "npowerai"}
    assert not set(SUITES["id"]) & set(SUITES["ood"])


@pytest.mark.parametrize("name", QWEN_RECIPES)
def test_qwen_recipes_train_on_the_id_suite_with_weights(name):
    cfg = load_recipe(name)
    assert cfg.tasks.split == "train"
    assert set(cfg.tasks.families) == set(SUITES["id"]), "every in-distribution family, and nothing else"
    assert not set(cfg.tasks.families) & set(SUITES["ood"])
    assert cfg.tasks.mixture is not None and cfg.tasks.mixture.weights, "per-family weights, not uniform over rows"
    assert set(cfg.tasks.mixture.weights) == set(SUITES["id"])
    notes: list[str] = []
    check_recipe(cfg, notes=notes)  # --dry-run on this CPU machine: configuration, not installation
    assert any(line.startswith("families with mixture weights: mimic_iii 12.5 %") for line in notes), notes
    assert not any("out-of-distribution" in line for line in notes)


def test_dry_run_prints_the_mixture_and_memory(train_main, capsys):
    assert train_main(["recipe=grpo_qwen14b", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# families with mixture weights: mimic_iii 12.5 %" in out and "ehrcon" not in out.split("# dry run")[1]
    assert re.search(r"KV \d+\.\d GiB \(192 KiB/token\) = [1-9]\d*\.\d sequences of 12,288", out), out
    assert "# attention: sdpa" in out


@pytest.mark.parametrize("name", ALL_RECIPES)
def test_no_recipe_names_a_kernel_its_extras_do_not_install(name):
    kernel = load_recipe(name).model.attn_implementation or "sdpa"
    extra = ATTENTION_KERNELS.get(kernel, "missing")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extra is None or extra in extras, f"{name}: {kernel} is installed by no extra"
    header = (RECIPES_DIR / f"{name}.yaml").read_text().split("method:")[0]
    if extra is not None:
        assert f"[{extra}]" in header, "a recipe that needs an extra names it in its header"


@pytest.mark.parametrize("override, expected", [
    (["trainer.vllm_gpu_memory_utilization=0.4"], "cannot hold one 12,288-token sequence"),
    (["trainer.vllm_enable_sleep_mode=false"], "need 80.8 GiB together"),
    (["trainer.per_device_train_batch_size=16", "trainer.gradient_accumulation_steps=4"], "micro-batch of 16"),
    (["trainer.per_device_train_batch_size=8", "trainer.gradient_accumulation_steps=8"],
     "training with vLLM asleep 95.9 GiB"),
    (["trainer.vllm_max_model_length=null"], "vllm_max_model_length is unset"),
    (["model.attn_implementation=flash_attention_3"], "installed by no extra"),
    (["model.attn_implementation=flash_attention_2", "model.dtype=float32"], "needs bf16 or fp16"),
    (["tasks.mixture.weights.ehrcon=1.0"], "missing [], not in tasks.families ['ehrcon']"),
    (["tasks.mixture.temperature=2.0"], "one of weights or temperature"),
    (["env.url=localhost:8000"], "env.url[0]='localhost:8000' is invalid"),
])
def test_dry_run_refuses_what_cannot_run(override, expected):
    with pytest.raises(RecipeError) as exc:
        check_recipe(load_recipe("grpo_qwen14b", override))
    assert expected in str(exc.value) and "\n" not in str(exc.value)


def test_a_gpu_card_of_another_size_changes_the_verdict(monkeypatch):
    monkeypatch.setenv("MEDCOPILOT_GPU_GIB", "139.8")  # an H200: both fit without sleep mode
    check_recipe(load_recipe("grpo_qwen14b", ["trainer.vllm_enable_sleep_mode=false"]))
    monkeypatch.setenv("MEDCOPILOT_GPU_GIB", "39.4")  # a 40 GB card cannot hold 14B and vLLM
    with pytest.raises(RecipeError, match="cannot hold one"):
        check_recipe(load_recipe("grpo_qwen14b"))


def test_known_shapes_match_the_published_kv_arithmetic():
    assert model_shape("Qwen/Qwen2.5-14B-Instruct").kv_bytes_per_token == 192 * 1024
    assert model_shape("Qwen/Qwen2.5-7B-Instruct").kv_bytes_per_token == 56 * 1024
    assert round(model_shape("Qwen/Qwen2.5-14B-Instruct").weight_gib, 1) == 27.5
    assert round(model_shape("Qwen/Qwen2.5-7B-Instruct").weight_gib, 1) == 14.2


def _adapter(folder, base):
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base} if base else {}))
    return folder


def test_a_vllm_stage_on_an_adapter_starts_from_the_chains_full_model(tmp_path):
    sft = _adapter(tmp_path / "sft", "Qwen/Qwen2.5-7B-Instruct")
    dpo = _adapter(tmp_path / "dpo", str(sft))
    assert vllm_base_model(str(dpo)) == "Qwen/Qwen2.5-7B-Instruct"
    notes: list[str] = []
    check_recipe(load_recipe("grpo_qwen7b", [f"model.name_or_path={dpo}"]), notes=notes)
    assert any("vLLM starts from the full model Qwen/Qwen2.5-7B-Instruct" in n for n in notes), notes
    # a chain that ends nowhere vLLM can load: refused with one line
    orphan = _adapter(tmp_path / "orphan", None)
    with pytest.raises(RecipeError, match="names no base_model_name_or_path"):
        check_recipe(load_recipe("grpo_qwen7b", [f"model.name_or_path={orphan}"]))
    lost = _adapter(tmp_path / "lost", str(tmp_path / "deleted_sft"))
    with pytest.raises(RecipeError, match="is not a model folder"):
        check_recipe(load_recipe("grpo_qwen7b", [f"model.name_or_path={lost}"]))
    # a later sweep stage whose folder is not written yet is checked against the chain's base model
    notes = []
    check_recipe(load_recipe("grpo_qwen7b", [f"model.name_or_path={tmp_path / 'not_yet'}"]),
                 base_model="Qwen/Qwen2.5-7B-Instruct", notes=notes)
    assert any("29.6 sequences" in n for n in notes), notes


def _extra_requirements(name: str) -> list[Requirement]:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return [Requirement(r) for r in extras[name]]


def _pins(path: str) -> dict[str, str]:
    pins = {}
    for line in (REPO / path).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{path}: {line} must be an exact pin"
            pins[req.name.lower().replace("_", "-")] = spec.version
    return pins


def test_gpu_extra_pins_vllm_exactly_and_the_gpu_constraints_satisfy_every_extra():
    gpu = {r.name: r for r in _extra_requirements("gpu")}
    assert [s.operator for s in gpu["vllm"].specifier] == ["=="], "vLLM is pinned exactly"
    pins = _pins("constraints-gpu.txt")
    assert pins["vllm"] == next(iter(gpu["vllm"].specifier)).version
    # vLLM 0.31.0's own metadata: torch==2.13.0, transformers>=5.10.4,<5.18 (engineering notes, section 4)
    assert pins["torch"] == "2.13.0" and Requirement("t>=5.10.4,<5.18").specifier.contains(pins["transformers"])
    for extra in ("train", "gpu", "flash", "deepspeed", "ray"):
        for req in _extra_requirements(extra):
            name = req.name.lower().replace("_", "-")
            if name in pins:
                assert req.specifier.contains(pins[name], prereleases=True), f"[{extra}] {req} vs {pins[name]}"
    cpu = _pins("constraints.txt")
    assert cpu["transformers"] != pins["transformers"], "the CPU and GPU sets are kept apart"
    for req in _extra_requirements("train"):  # the CPU set satisfies [train] too
        name = req.name.lower().replace("_", "-")
        if name in cpu:
            assert req.specifier.contains(cpu[name].split("+")[0]), f"[train] {req} vs constraints.txt {cpu[name]}"


def test_mixture_shares_and_resampling():
    assert mixture_shares({"a": 300, "b": 3}, weights={"a": 1, "b": 3}) == {"a": 0.25, "b": 0.75}
    shares = mixture_shares({"a": 400, "b": 100}, temperature=2.0)  # sqrt sizes: 20 : 10
    assert shares == pytest.approx({"a": 2 / 3, "b": 1 / 3})
    with pytest.raises(ValueError, match="missing"):
        mixture_shares({"a": 1, "b": 1}, weights={"a": 1})
    rows = [{"family": "a", "i": i} for i in range(300)] + [{"family": "b", "i": i} for i in range(3)]
    epoch = resample(rows, {"a": 0.25, "b": 0.75}, n=400, seed=1)
    small = [r["i"] for r in epoch if r["family"] == "b"]
    assert len(epoch) == 400 and len(small) == 300
    assert {i: small.count(i) for i in range(3)} == {0: 100, 1: 100, 2: 100}, "a small family repeats evenly"
    big = [r["i"] for r in epoch if r["family"] == "a"]
    assert len(set(big)) == 100 and big != list(range(100)), "a large family gets a random subset, not its head"
    assert resample(rows, {"a": 0.25, "b": 0.75}, n=400, seed=1) == epoch


def test_trainers_resample_their_rows_to_the_recipes_mixture(capsys):
    from medagentgym.medcopilot.data import Episode, sft_rows
    from medagentgym.medcopilot.mixture import apply_mixture, mixed_rows

    cfg = load_recipe("sft_tiny", ["tasks.families=[a_fam, b_fam]",
                                   "tasks.mixture={weights: {a_fam: 1.0, b_fam: 1.0}, rows: 40}"])

    def episode(family, i):
        return Episode(task_id=f"{family}/{i}", family=family, category="c", success=True,
                       messages=[{"role": "user", "content": f"{family} {i}"}, {"role": "assistant", "content": "7"}])

    episodes = [episode("a_fam", i) for i in range(30)] + [episode("b_fam", i) for i in range(2)]
    rows = mixed_rows(cfg.tasks, episodes, sft_rows, tag="sft")
    assert len(rows) == 40 and sum("b_fam" in r["messages"][0]["content"] for r in rows) == 20
    assert "[sft] 40 rows: a_fam 50.0 % (n=30), b_fam 50.0 % (n=2)" in capsys.readouterr().out
    plain = load_recipe("sft_tiny")
    assert mixed_rows(plain.tasks, episodes, sft_rows) == sft_rows(episodes), "no mixture: rows as before"
    grpo_rows = [{"family": "a_fam", "i": i} for i in range(6)]
    out = apply_mixture(cfg.tasks, grpo_rows, tag="grpo")
    assert len(out) == 40 and all(r["family"] == "a_fam" for r in out)
    assert "no rows for b_fam" in capsys.readouterr().out


def test_per_family_success_is_logged_every_step():
    from medagentgym.medcopilot.metrics import EpisodeStats
    from medagentgym.medcopilot.rewards_adapter import EpisodeReward

    logged = {}
    stats = [EpisodeStats(success=s).to_dict() for s in (True, False, True, True)]
    EpisodeReward("correctness", group_size=2)(
        prompts=["p"] * 4, completions=["c"] * 4, reward_correctness=[1.0, 0.0, 1.0, 1.0], episode_stats=stats,
        family=["mimic_iii", "mimic_iii", "ehrshot", "ehrshot"], log_metric=logged.__setitem__)
    assert logged["env/success_rate/mimic_iii"] == 0.5 and logged["env/success_rate/ehrshot"] == 1.0
    assert logged["env/success_rate"] == 0.75
