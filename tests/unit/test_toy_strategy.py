"""A strategy owns its records and its view: the proof, from this file alone (nothing under playground/ edited).

"toy-margin" is greedy decoding that records, for each token, the margin of the model's top logit over its
runner-up: logit₁ − logit₂ = ln p₁ − ln p₂ under the model's own softmax, which the plug-ins read from the top
alternatives each backend records (a PyTorch plug-in on generate()'s own loop, a JAX plug-in on the greedy one).
Its entry declares that per-token record (`tokens[i].toy_margin`), two per-run records (`extra.toy_margin_min`,
built from the output, and `extra.toy_close_calls`, which the plug-ins count against their knob), and the view
that draws them under the token view; its knob's record puts it in a group of the column card of its own. The
test runs it through the runner on both backends, reads the records in the Result JSON, and (slow) picks it on the
served page in Chromium and finds its knob and its view's values there. The registry is as before once each test
ends (`registry.registered`).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from playground import registry, runner
from playground.registry import Knob, RecordField, RunRecords, Strategy, TokenRecords, lazy
from playground.spec import RunSpec
from playground.ui.card_part import CardPart
from playground.ui.strategy_view import StrategyView
from tests.helpers import CHROMIUM, CHROMIUM_ARGS, allowed_tiny_model, choose_option, module_tiny_model

NAME, KEY, CLOSE = "toy-margin", "toy_margin", "toy_close_below"
PROMPT = "a strategy owns its records"


def margin(top: Sequence[tuple[int, float, float]]) -> float:
    """The top logit minus the runner-up's, from their probabilities under the model's own softmax."""
    (_, _, first), (_, _, second) = top[0], top[1]
    return math.log(first) - math.log(second)


def add_margins(spec: RunSpec, token_info: list[Any] | None, extra: dict[str, Any]) -> None:
    """Each token's margin into its record, and the run's close calls (margin under the knob) into `extra`."""
    for known in token_info or []:
        known[KEY] = margin(known["top"])
    extra["toy_close_calls"] = sum(known[KEY] < getattr(spec, CLOSE) for known in token_info or [])


def _torch_plugin(spec: RunSpec) -> Any:
    from playground.backends.torch.strategy import Generate

    class MarginTorch(Generate):  # generate()'s own greedy loop; its record added after the call
        def recorded(self, call: Any, first: list[int]) -> Any:
            recorded = super().recorded(call, first)
            add_margins(self.spec, recorded.token_info, recorded.extra)
            return recorded

    return MarginTorch(spec)


def _jax_plugin(spec: RunSpec, draft: Any) -> Any:
    from playground.backends.jax.strategies.plain import PlainDecoding

    class MarginJax(PlainDecoding):  # the greedy plug-in; its record added to what its output holds
        def outcome(self, request: Any, run: Any) -> dict[str, Any]:
            fields = super().outcome(request, run)
            add_margins(self.spec, fields["token_info"], fields.setdefault("extra", {}))
            return fields

    return MarginJax(spec, samples=False)


def token_margins(tokenizer: Any, output: Any) -> list[float | None] | None:
    """tokens[i].toy_margin: what the plug-in recorded for each token, rounded as the Result rounds."""
    if not output.token_info:
        return None
    return [round(known[KEY], 5) if KEY in known else None for known in output.token_info]


def least_margin(tokenizer: Any, output: Any) -> float | None:
    """extra.toy_margin_min: the closest call of the run."""
    margins = [m for m in token_margins(tokenizer, output) or [] if m is not None]
    return min(margins) if margins else None


class MarginView(StrategyView):
    """Each token's margin in its tooltip and its sampling-cut panel, and every margin under the tokens."""

    def tooltip_lines(self, token: Any) -> list[str]:
        value = token.get(KEY)
        return [] if value is None else [f"top-1 − top-2 logit: {value:.3f}"]

    def below_tokens(self, tokens: Sequence[Any]) -> str:
        values = [t.get(KEY) for t in tokens]
        if not any(v is not None for v in values):
            return ""
        cells = "".join(f"<span class='toy-value' data-pos='{i}' title='{html.escape(t['text'], quote=True)}'>"
                        f"{v:.3f}</span> " for i, (t, v) in enumerate(zip(tokens, values, strict=True))
                        if v is not None)
        return f"<div class='method-note toy-margin-view'>top-1 − top-2 logit per token: {cells}</div>"

    def panel_html(self, record: Any, spec: Mapping[str, Any]) -> str:
        value = record.get(KEY)
        return "" if value is None else f"<div class='method-panel'>margin over the runner-up: {value:.3f}</div>"


CLOSE_KNOB = Knob(name=CLOSE, default=0.1, low=0.0, high=5.0, step=0.05, group="toy", label="close call below",
                  help="toy-margin: a token whose margin is under this many logits counts as a close call")
TOY = Strategy(
    name=NAME, label="greedy, margin recorded", help="the most likely token, with its logit's lead over the next",
    impl={"torch": _torch_plugin, "jax": _jax_plugin}, knobs=(CLOSE,),
    token_records=(TokenRecords(key=KEY, build=token_margins, fields=(
        RecordField(name=KEY, kind="float", unit="logits",
                    meaning="the model's top logit minus its runner-up's, at this token"),)),),
    run_records=(RunRecords(key="toy_margin_min", in_extra=True, build=least_margin, fields=(
        RecordField(name="toy_margin_min", kind="float", unit="logits", meaning="the run's smallest margin"),)),
                 RunRecords(key="toy_close_calls", in_extra=True, fields=(  # the plug-ins put it in `extra`
                     RecordField(name="toy_close_calls", kind="int", unit="tokens",
                                 meaning=f"tokens whose margin was under {CLOSE}"),))),
    view=lazy(__name__, "MarginView"))


@pytest.fixture
def local_model(tmp_path, monkeypatch):
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        yield path


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_toy_strategy_record_and_view(local_model, backend):
    with registry.registered(CLOSE_KNOB, TOY):
        spec = RunSpec.from_dict({"model": local_model, "backend": backend, "strategy": NAME, "max_new_tokens": 12,
                                  CLOSE: 0.02})
        result = json.loads(json.dumps(runner.run_to_result(PROMPT, spec)))  # as the CLI and the API hand it out
        greedy = runner.run_to_result(PROMPT, RunSpec(model=local_model, backend=backend, max_new_tokens=12))
        from playground.ui.strategy_view import view_of
        from playground.ui.tokens import result_tokens_html

        view = view_of(NAME)
        drawn = result_tokens_html(result, view)
    assert result["token_ids"] == greedy["token_ids"]  # it decodes greedily
    margins = [token[KEY] for token in result["tokens"]]
    assert len(margins) == 12 and all(m is not None and m >= 0 for m in margins)
    for token, value in zip(result["tokens"], margins, strict=True):  # the margin of the recorded alternatives
        first, second = token["alternatives"][0], token["alternatives"][1]
        assert value == pytest.approx(first["logprob_model"] - second["logprob_model"], abs=1e-4)
    assert result["extra"]["toy_margin_min"] == min(margins)
    assert result["extra"]["toy_close_calls"] == sum(m < 0.02 for m in margins)
    assert all(token[KEY] is None for token in greedy["tokens"])  # another strategy's tokens: the key, None
    assert "contrastive" in result["tokens"][0] and result["beam_tree"] is None  # the built-in keys stay
    assert isinstance(view, MarginView) and drawn.count("class='toy-value'") == 12
    assert f"{margins[0]:.3f}</span>" in drawn and f"top-1 − top-2 logit: {margins[0]:.3f}" in html.unescape(drawn)
    after = runner.run_to_result(PROMPT, RunSpec(model=local_model, backend=backend, max_new_tokens=2))
    assert KEY not in after["tokens"][0] and "toy_margin_min" not in after["extra"]  # unregistered: gone


@pytest.fixture(scope="module")
def toy_page(tmp_path_factory):
    """The served app, in this process, with the toy strategy registered before the page is built."""
    from playground.tools.serve import HOST, free_port
    from playground.ui import serving

    with registry.registered(CLOSE_KNOB, TOY), module_tiny_model(tmp_path_factory) as model:
        demo = serving.build_app()
        port = free_port()
        serving.launch(demo, HOST, port, block=False)
        try:
            yield f"http://{HOST}:{port}/", model
        finally:
            demo.close()


@pytest.mark.slow
def test_toy_strategy_view_on_the_page_in_chromium(toy_page):
    url, model = toy_page
    # on a thread of its own: Playwright's sync API refuses a thread where an asyncio loop runs, as one may be left
    # running in this worker's main thread by a test of another file
    with ThreadPoolExecutor(1) as pool:
        pool.submit(_drive_the_page, url, model).result()


def _drive_the_page(url: str, model: str) -> None:
    import os
    from pathlib import Path

    from playwright import sync_api

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url)
        page.wait_for_selector("#run", timeout=30_000)
        page.locator("#remove-1").click()  # one column: the toy's
        page.locator("#model-0 input").fill(model)
        page.locator("#model-0 input").press("Enter")
        choose_option(page, "strategy-0", NAME)
        page.wait_for_selector(f"#{CLOSE}-0", state="visible", timeout=10_000)  # its knob's group, from the record
        box = page.locator("#max_new_tokens-0 input[type=number]")
        box.fill("8")
        box.press("Enter")
        page.locator("#prompt textarea").fill(PROMPT)
        page.locator("#run").click()
        page.wait_for_selector("#tokens-0 .toy-margin-view", timeout=120_000)
        values = page.locator("#tokens-0 .toy-margin-view .toy-value").all_inner_texts()
        exported = page.locator("#tokens-0 .tok").first.get_attribute("title") or ""
        assert len(values) == 8 and all(float(v) >= 0 for v in values), values
        assert f"top-1 − top-2 logit: {values[0]}" in exported  # the tooltip of the first token says the same
        folder = os.environ.get("PLAYGROUND_SHOTS")
        if folder:  # the view in light and dark mode, and on a 390 px phone
            Path(folder).mkdir(parents=True, exist_ok=True)
            page.locator("#tokens-0").screenshot(path=str(Path(folder) / "toy-light.png"))
            for name, viewport, query in (("toy-dark", {"width": 1440, "height": 1000}, "?__theme=dark"),
                                          ("toy-phone", {"width": 390, "height": 844}, "")):
                other = browser.new_page(viewport=viewport)
                other.goto(page.url.replace("/?", f"/{query}&" if query else "/?", 1) if "?" in page.url
                           else url + query)
                other.wait_for_selector("#run", timeout=30_000)
                other.locator("#run").click()
                other.wait_for_selector("#tokens-0 .toy-margin-view", timeout=120_000)
                other.locator("#tokens-0").screenshot(path=str(Path(folder) / f"{name}.png"))
                other.close()
        browser.close()
    assert not errors, errors


def test_toy_strategys_knob_gets_a_group_of_the_column_card_from_its_record():
    from playground.ui.columns import relevant_keys, visibility
    from playground.ui.wiring import build_ui

    with registry.registered(CLOSE_KNOB, TOY):
        _, page = build_ui()
        assert visibility(NAME, "dynamic", "torch")["toy_knobs"]
        assert not visibility("greedy", "dynamic", "torch")["toy_knobs"]
        assert CLOSE in relevant_keys(NAME, "dynamic", "torch")
        widget = page.columns[0].knobs[CLOSE]
        assert (widget.minimum, widget.maximum, widget.label) == (0.0, 5.0, "close call below")


class HundredthsCard(CardPart):
    """A control of the page's own in the toy's group: the threshold in hundredths, sent as the knob."""

    group = "toy_knobs"
    defaults = {"toy_hundredths": 10}

    def draw(self, index: int, knobs: dict[str, Any], groups: dict[str, Any], values: Mapping[str, Any],
             shown: Mapping[str, bool]) -> None:
        import gradio as gr

        knobs["toy_hundredths"] = gr.Number(values["toy_hundredths"], label="close call below (hundredths)",
                                            elem_id=f"toy_hundredths-{index}")

    def to_settings(self, values: Mapping[str, Any], settings: dict[str, Any]) -> None:
        if CLOSE in settings:  # only where the column's strategy reads the knob
            settings[CLOSE] = values["toy_hundredths"] / 100

    def to_values(self, settings: Mapping[str, Any], values: dict[str, Any], defaults: Mapping[str, Any]) -> None:
        values["toy_hundredths"] = round(100 * values[CLOSE])


class CardView(MarginView):
    card = HundredthsCard()


def test_a_strategys_view_adds_its_own_control_to_the_column_card():
    """The card asks each registered view for its part: a control, its first value, and how it becomes the
    strategy's knob (and back), with nothing under playground/ naming the strategy."""
    from dataclasses import replace

    from playground.ui.columns import column_settings, control_values
    from playground.ui.wiring import build_ui

    with registry.registered(CLOSE_KNOB, replace(TOY, view=CardView)):
        _, page = build_ui()
        assert page.columns[0].knobs["toy_hundredths"].elem_id == "toy_hundredths-0"
        values = control_values({"strategy": NAME, CLOSE: 0.25})
        assert values["toy_hundredths"] == 25
        assert column_settings({**values, "toy_hundredths": 40})[CLOSE] == 0.4
        assert CLOSE not in column_settings({**values, "strategy": "greedy"})
