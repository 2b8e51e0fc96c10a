"""Contrastive search and DoLa on the page: their own controls (contrastive search's candidates are its top_k, not
the sampling filter's), the sampling knobs hidden for strategies that do not sample, what the token view and the
token panel show of each method, and the presets that put them side by side."""

from __future__ import annotations

from typing import Any

from playground import compatibility, registry
from playground.registry import Strategy, lazy
from playground.result import TokenRecord
from playground.spec import RunSpec
from playground.ui import columns
from playground.ui.contrastive_card import CANDIDATES
from playground.ui.cut import cut_html
from playground.ui.presets import PRESETS
from playground.ui.strategy_view import view_of
from playground.ui.tokens import tokens_html


def _values(strategy: str, **changed: Any) -> dict[str, Any]:
    values = columns.control_values({"strategy": strategy})
    return {**values, **changed}


def test_the_strategy_list_offers_both_and_says_where_they_do_not_run():
    torch_choices = dict((value, label) for label, value in columns.strategy_choices("torch", "dynamic"))
    assert torch_choices["contrastive"] == "contrastive" and torch_choices["dola"] == "dola"
    static = dict((value, label) for label, value in columns.strategy_choices("torch", "static"))
    assert static["contrastive"] == "contrastive ✗ with static"  # the cache is the reason
    jax_choices = dict((value, label) for label, value in columns.strategy_choices("jax", "static"))
    assert jax_choices["contrastive"] == "contrastive"  # on JAX it runs over every cache
    assert jax_choices["dola"] == "dola"


def test_a_strategy_without_a_jax_plug_in_is_flagged_on_jax_only():
    """A strategy registered with a PyTorch side alone is offered on both backends, marked "✗ on jax" there (the
    notice says why), and runs unmarked on PyTorch; every built-in one has both sides."""
    torch_only = Strategy(name="torch-only", label="PyTorch only", help="a strategy with no JAX plug-in",
                          impl={"torch": lazy("playground.backends.torch.strategy", "Generate")})
    with registry.registered(torch_only):
        jax_choices = dict((value, label) for label, value in columns.strategy_choices("jax", "static"))
        torch_choices = dict((value, label) for label, value in columns.strategy_choices("torch", "static"))
        assert jax_choices["torch-only"] == "torch-only ✗ on jax"
        assert torch_choices["torch-only"] == "torch-only"
        reason = compatibility.refusal("jax", "torch-only", "static")
        assert reason is not None and reason.startswith("PyTorch only has no plug-in on the JAX path")
        assert reason.endswith("backend 'torch' runs it")
    assert [s.name for s in registry.strategies() if s.plugin("jax") is None] == []


def test_each_method_shows_its_own_knobs_and_only_sampling_strategies_show_the_samplers():
    contrastive = columns.visibility("contrastive", "dynamic", "torch")
    assert contrastive["contrastive_knobs"] and not contrastive["sampling_knobs"] and not contrastive["dola_knobs"]
    dola = columns.visibility("dola", "dynamic", "torch")
    assert dola["dola_knobs"] and dola["penalty_knobs"] and not dola["sampling_knobs"]
    assert columns.visibility("sampling", "dynamic", "torch")["sampling_knobs"]
    assert not columns.visibility("greedy", "dynamic", "torch")["contrastive_knobs"]


def test_contrastive_searchs_candidates_control_is_its_top_k_and_the_sampling_slider_keeps_its_own():
    values = _values("contrastive", penalty_alpha=0.3, top_k=50, **{CANDIDATES: 6})
    settings = columns.column_settings(values)
    assert settings["top_k"] == 6 and settings["penalty_alpha"] == 0.3
    assert "temperature" not in settings and "top_p" not in settings  # no sampler reaches the run
    assert RunSpec.from_dict(settings).top_k == 6
    back = columns.control_values(settings)  # a shared link puts the value back on the candidates control
    assert back[CANDIDATES] == 6 and back["top_k"] == RunSpec().top_k
    sampled = columns.column_settings(_values("sampling", top_k=30, **{CANDIDATES: 6}))
    assert sampled["top_k"] == 30 and "penalty_alpha" not in sampled
    assert columns.control_values(sampled)[CANDIDATES] == 4  # the paper's k, ready for a switch of strategy


def test_dola_layers_reach_the_run_with_the_penalties():
    settings = columns.column_settings(_values("dola", dola_layers="low", repetition_penalty=1.2))
    assert settings["dola_layers"] == "low" and settings["repetition_penalty"] == 1.2
    assert columns.notice_text(settings) == ""
    assert "dola_layers='mid'" in columns.notice_text({**settings, "dola_layers": "mid"})


def _token(token_id: int, text: str, **method: Any) -> TokenRecord:
    return {"id": token_id, "text": text, "p": 0.5, "entropy": 1.0, "p_model": 0.5, "entropy_model": 1.0,
            "top": None, "draft": None, **method}  # type: ignore[typeddict-item]


CANDIDATES_SEEN = [{"id": 1, "text": " the", "p": 0.6, "penalty": 0.9, "score": -0.3},
                   {"id": 2, "text": " a", "p": 0.3, "penalty": 0.2, "score": 0.0}]


def test_the_token_view_marks_where_contrastive_search_took_a_less_probable_candidate():
    view = view_of("contrastive")  # the view its registry entry names
    won = _token(2, " a", contrastive=CANDIDATES_SEEN)
    top = _token(1, " the", contrastive=CANDIDATES_SEEN)
    assert view.token_classes(won) == ["contrast"] and view.token_classes(top) == []
    assert any("' a': 0.300 · 0.200 → 0.000 ◀" in line for line in view.tooltip_lines(won))
    assert "at 1 of 2 tokens" in view.below_tokens([won, top])
    assert "class='tok contrast'" in tokens_html([won, top], view=view)
    assert "contrast" not in tokens_html([won, top])  # another strategy's view marks nothing
    panel = view.panel_html(won, {"penalty_alpha": 0.5})
    assert "(1 − 0.5)·p − 0.5·penalty" in panel and panel.count("<tr") == 3 and "class=chosen" in panel


def test_the_token_view_names_the_layer_dola_contrasted_and_marks_a_changed_choice():
    dola = {"layer": 3, "layers": [1, 3], "js": [0.01, 0.02], "greedy_id": 9, "greedy_text": " Paris",
            "changed": True}
    view = view_of("dola")
    changed = _token(4, " Lyon", dola=dola)
    kept = _token(9, " Paris", dola={**dola, "layer": 1, "changed": False})
    assert view.token_classes(changed) == ["contrast"] and view.token_classes(kept) == []
    assert "the final layer alone would have taken ' Paris'" in "\n".join(view.tooltip_lines(changed))
    summary = view.below_tokens([changed, kept])
    assert "at 1 of 2 tokens" in summary and "layers used: 1 ×1, 3 ×1" in summary
    result: Any = {"tokens": [changed], "spec": RunSpec(strategy="dola").to_dict(), "prefix": None}
    assert "DoLa contrasted layer <b>3</b>" in cut_html(result, 0, "1: dola")
    assert view.below_tokens([_token(1, "x")]) == ""  # tokens without its record get no line
    assert view_of("greedy").below_tokens([changed]) == ""  # other strategies' views draw nothing


def test_the_cut_of_a_dola_token_shows_the_contrast_as_its_own_stage_before_the_chain():
    dola = {"layer": 3, "layers": [1, 3], "js": [0.01, 0.02], "greedy_id": 9, "greedy_text": " Earth",
            "changed": True}
    token = _token(4, " closest", dola=dola, alternatives=[
        {"id": 9, "text": " Earth", "p": 0.0, "p_model": 0.62, "removed_by": None},
        {"id": 4, "text": " closest", "p": 0.7, "p_model": 0.2, "removed_by": None},
        {"id": 5, "text": ",", "p": 0.0, "p_model": 0.1, "removed_by": "dola"}],
        stages=[{"stage": "dola", "removed": 49000, "moved": 0.716},
                {"stage": "repetition_penalty", "removed": 0, "moved": 0.01}])
    spec = RunSpec(strategy="dola", repetition_penalty=1.2).to_dict()
    html = cut_html({"tokens": [token], "spec": spec, "prefix": None}, 0, "1: dola")
    contrast = "DoLa&#x27;s contrast (final layer − layer 3, within a tenth of its top)"
    assert f"<tr><td>{contrast}</td><td>49000</td><td>0.716</td></tr>" in html
    assert html.index(contrast + "</td>") < html.index("repetition penalty 1.2</td>")  # first, before the chain
    assert f"✂ {contrast}" in html and "✂ repetition penalty" not in html
    assert "would have taken <code>&#x27; Earth&#x27;</code>, the chart's top candidate" in html
    assert f"<div class='cut-filters'>{contrast}; repetition penalty 1.2" in html


def test_the_guide_presets_run_as_set():
    for name in ("The guide's methods", "DoLa vs greedy"):
        for column in PRESETS[name].columns:
            assert columns.problem(column, check_sources=False) == "", (name, column)
    strategies = [c["strategy"] for c in PRESETS["The guide's methods"].columns]
    assert strategies[:2] == ["greedy", "contrastive"] and "dola" in strategies


def test_a_diverse_beam_column_shows_beam_knobs_and_its_groups_and_draws_its_tree_by_group():
    shown = columns.visibility("diverse_beam", "dynamic", "torch")
    assert shown["beam_knobs"] and shown["diverse_knobs"] and not shown["sampling_knobs"]
    settings = columns.column_settings(_values("diverse_beam", num_beams=6, num_beam_groups=3, diversity_penalty=0.5))
    assert (settings["num_beam_groups"], settings["diversity_penalty"]) == (3, 0.5)
    assert columns.notice_text(settings) == ""
    assert "must divide num_beams=4" in columns.notice_text({**settings, "num_beams": 4})
    from playground.ui.beam_view import beam_html

    node = {"parent": None, "token": 1, "text": " a", "score": -1.0, "kept": True, "finished": False,
            "chosen": True, "group": 1, "penalty": 0.5}
    result: Any = {"beam_tree": [[{**node, "group": 0, "penalty": 0.0}, node]], "scores": [-1.0],
                   "sequences": [" a"]}
    view = beam_html(result)
    assert "rect class='beam-group g1'" in view and "group 2" in view and "diversity penalties paid" in view
    assert "diversity penalty paid here 0.50" in view


def test_the_guide_methods_knobs_can_be_swept_against_what_they_move():
    from playground.sweep.knobs import quality_measure, sweepable
    from playground.sweep.measures import returned_overlap

    assert {"penalty_alpha", "diversity_penalty", "num_beam_groups"} <= set(sweepable())
    assert quality_measure("diversity_penalty") == quality_measure("num_beam_groups") == "returned_overlap"
    assert quality_measure("penalty_alpha") == "repeat_4gram_rate"
    assert returned_overlap(["a b c", "a b c"]) == 1.0 and returned_overlap(["a b", "c d"]) == 0.0
    assert returned_overlap(["a b c d", "a x c d"]) == 0.75 and returned_overlap(["one"]) is None
