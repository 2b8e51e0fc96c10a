"""The page's look (theme, CSS) and its few lines of JS: the settings in the address bar, the Run shortcut, and
notes where a typed number was put back in range."""

from __future__ import annotations

import gradio as gr

from playground.ui.cache_view import CACHE_CSS
from playground.ui.columns import MAX_COLUMNS
from playground.ui.plots import PALETTE
from playground.ui.step_view import STEP_CSS
from playground.ui.strategy_view import views_css
from playground.ui.table import scroll_cue

THEME = gr.themes.Default(primary_hue="indigo", secondary_hue="slate", neutral_hue="slate", radius_size="md",
                       font=["system-ui", "Segoe UI", "Helvetica Neue", "Arial", "sans-serif"],
                       font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "monospace"]).set(
    block_padding="8px 10px", layout_gap="10px", form_gap_width="6px",
    # text at 4.5:1 or more against its background, light and dark (the defaults give hints 2.6:1 on white)
    body_text_color_subdued="*neutral_500", body_text_color_subdued_dark="*neutral_400",
    button_primary_background_fill="*primary_600", button_primary_background_fill_hover="*primary_700",
    button_cancel_background_fill="#dc2626", button_cancel_background_fill_hover="#b91c1c",
    button_cancel_background_fill_dark="#b91c1c", button_cancel_background_fill_hover_dark="#991b1b")

# history.replaceState: the address changes without a reload or a new history entry, so Back still leaves
WRITE_URL_JS = """(token) => {
  const url = new URL(window.location.href);
  if (token) { url.searchParams.set('s', token); } else { url.searchParams.delete('s'); }
  window.history.replaceState(null, '', url);
}"""

RUN_SHORTCUT = "Ctrl+Enter (⌘+Enter on a Mac)"
# Gradio's multi-line textbox leaves Ctrl/Cmd+Enter alone; the listener is installed once per page, in the
# capture phase so it runs before the textarea's own handlers
SHORTCUT_JS = """() => {
  if (window.__playgroundShortcut) { return; }
  window.__playgroundShortcut = true;
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'Enter' || !(event.ctrlKey || event.metaKey) || !event.target.closest('#prompt')) { return; }
    const run = document.querySelector('#run');
    if (run && !run.disabled) { event.preventDefault(); run.click(); }
  }, true);
}"""

# A number typed out of a control's range: the page puts it back in range when the entry is committed, and a
# note under the control says what was typed and what it became; an in-range entry clears the note. The server
# never sees the out-of-range value (Gradio would answer it with an error).
CLAMP_NOTE_JS = """() => {
  if (window.__playgroundClampNotes) { return; }
  window.__playgroundClampNotes = true;
  // a preset or pasted settings replace every value: the notes about the old ones go with them
  document.addEventListener('click', (event) => {
    if (event.target.closest('.presets button, #apply-settings')) {
      document.querySelectorAll('.clamp-note').forEach((note) => note.remove());
    }
  }, true);
  // Seen in the capture phase, before Gradio's own listeners: an out-of-range `input` (a keystroke on the way to
  // a number) never reaches the server, which would refuse it as an error; on `change` (the entry committed) the
  // value is put in range, said in the note, and sent as an `input` of its own
  document.addEventListener('input', (event) => {
    const box = event.target;
    if (!(box instanceof HTMLInputElement) || box.type !== 'number' || box.value === '') { return; }
    const typed = Number(box.value);
    const low = box.min === '' ? -Infinity : Number(box.min);
    const high = box.max === '' ? Infinity : Number(box.max);
    if (typed < low || typed > high) { event.stopImmediatePropagation(); }
  }, true);
  document.addEventListener('change', (event) => {
    const box = event.target;
    if (!(box instanceof HTMLInputElement) || box.type !== 'number' || box.value === '') { return; }
    const block = box.closest('[id]');
    if (!block) { return; }
    const typed = Number(box.value);
    const low = box.min === '' ? -Infinity : Number(box.min);
    const high = box.max === '' ? Infinity : Number(box.max);
    let note = block.querySelector(':scope > .clamp-note');
    if (typed >= low && typed <= high) { note?.remove(); return; }
    if (!note) {
      note = document.createElement('div');
      note.className = 'clamp-note';
      note.setAttribute('role', 'status');
      block.appendChild(note);
    }
    const bound = typed > high ? box.max : box.min;
    const limit = typed > high ? `above the maximum, ${bound}` : `below the minimum, ${bound}`;
    note.textContent = `${box.value} is ${limit}: set to ${bound}`;
    box.value = bound;
    box.dispatchEvent(new Event('input', { bubbles: true }));
  }, true);
}"""

CSS = """
/* the plots' y-axis labels sit a few px left of their SVG on a narrow screen; the block's padding has room. Their
   y-axis titles would sit further out, past the block's edge: on a phone the plot titles carry the unit alone */
#speed-plot svg, #latency-plot svg, #kv-plot svg { overflow: visible; }
@media (max-width: 480px) { [aria-label^="Y-axis"] .role-axis-title { display: none; } }
/* Vega paints a plot's text and grid in the theme's colours of the moment it draws, and the plots do not redraw
   when the system switches between light and dark while the page is open: these follow the page's theme */
.vega-embed svg .mark-text text { fill: var(--body-text-color); }
.vega-embed svg .role-axis-grid line, .vega-embed svg .role-axis-tick line,
.vega-embed svg .role-frame > g > path.background { stroke: var(--border-color-primary); }
/* a sweep or long-context plot's label takes room inside the block's fixed height: the chart fills what is left,
   so its legend is drawn whole instead of cut off at the block's bottom edge */
#sweep-plots .block, .context-plots .block { display: flex; flex-direction: column; }
/* the Long context plots' legend is the tab's own (#context-legend), which wraps on a phone */
.context-plots .role-legend { display: none; }
.context-part.context-part-empty { display: none !important; }
.context-legend { display: flex; flex-wrap: wrap; gap: 4px 14px; align-items: center; font-size: 0.9em; }
.context-key { display: inline-flex; align-items: center; gap: 5px; white-space: nowrap; }
.context-key i { display: inline-block; width: 18px; height: 4px; border-radius: 2px; }
.context-key-note { color: var(--body-text-color-subdued); font-size: 0.92em; }
.context-load p { color: #b45309; margin: 2px 0; font-size: 0.9em; }
.dark .context-load p { color: #fbbf24; }
#sweep-plots .vega-embed, .context-plots .vega-embed { flex: 1 1 0; min-height: 0; height: auto; }
.clamp-note { font-size: 0.82em; color: #b45309; padding: 2px 0 0; }
.dark .clamp-note { color: #fbbf24; }
/* the selected tab's label takes the primary colour, 4.3:1 on the dark page: a lighter shade of it */
.dark #tabs button[role="tab"][aria-selected="true"] { color: #a5b4fc; }
/* on a phone the four tab names do not fit one row, and Gradio moves the rest behind its "⋯" button: it is
   labelled, and the tabs are narrower, so a visitor sees that Sweep, Sampler lab and Long context are there */
@media (max-width: 480px) {
  #tabs button[role="tab"], #tabs .tab-container.visually-hidden button { padding: 0 8px; }
  #tabs .overflow-menu > button { display: inline-flex; align-items: center; gap: 4px; width: auto; padding: 0 6px; }
  #tabs .overflow-menu > button::after { content: "more tabs"; font-size: 0.85em; white-space: nowrap; }
}
.gradio-container { max-width: 1600px !important; width: 100% !important; margin: 0 auto !important; }
.intro h1 { margin-bottom: 2px; }
.intro p { color: var(--body-text-color-subdued); margin-top: 0; }
.toolbar button { min-height: 40px; }
.presets { align-items: center; gap: 6px; flex-wrap: wrap; }
.presets .presets-label { flex: 0 0 auto !important; min-width: 0 !important; }
.presets button { flex: 0 0 auto !important; width: auto !important; }
.status { min-height: 1.6em; font-size: 0.95em; }
.run-card { border: 1px solid var(--border-color-primary); border-radius: 10px; padding: 8px !important;
            background: var(--background-fill-secondary); }
.card-head { align-items: center; flex-wrap: nowrap; }
.card-title h3 { margin: 0; }
.remove-btn { max-width: 40px; }
.notice p { margin: 0; font-size: 0.88em; }
.notice:not(:empty) { color: var(--body-text-color); }
.out-card textarea { font-size: 0.95em; }
/* overflow-wrap: a text with no space or hyphen (DoLa repeating "anananan") is one unbreakable line of spans, and
   ran past its card */
.tokens { font-family: var(--font-mono); font-size: 0.86em; line-height: 1.9; max-height: 260px;
          overflow-y: auto; overflow-wrap: anywhere; padding: 6px; border: 1px solid var(--border-color-primary);
          border-radius: 8px;
          background: var(--background-fill-primary); color: var(--body-text-color); }
.tokens.empty { color: var(--body-text-color-subdued); font-family: var(--font); }
.tok { padding: 1px 1px; margin: 0 1px 0 0; border-radius: 3px; white-space: pre-wrap; cursor: help; color: inherit; }
.tok[style*="background"] { color: #111; }
.tok:focus { outline: 2px solid var(--color-accent); outline-offset: 1px; }
.tokens .tok:focus::after { content: attr(title); position: fixed; left: 8px; right: 8px; bottom: 8px; z-index: 30;
    display: block; max-height: 45vh; overflow: hidden; padding: 8px 10px; white-space: pre-wrap; line-height: 1.35;
    background: var(--background-fill-primary); color: var(--body-text-color);
    border: 1px solid var(--border-color-primary); border-radius: 6px; box-shadow: var(--shadow-drop-lg); }
.tok.diverge { outline: 2px solid #dc2626; outline-offset: 1px; }
.tok.masked { box-shadow: inset 0 -3px 0 #0d9488; }
.dark .tok.masked { box-shadow: inset 0 -3px 0 #2dd4bf; }
.constraint-note { font-size: 0.85em; padding-top: 4px; color: var(--body-text-color); }
.constraint-note.bad b { color: #b45309; }
.dark .constraint-note.bad b { color: #fbbf24; }
.method-note { font-size: 0.85em; color: var(--body-text-color-subdued); padding-top: 4px; overflow-wrap: anywhere; }
.method-panel p { margin: 2px 0 4px; }
.method-panel tr.chosen { font-weight: 600; background: var(--background-fill-secondary); }
.tok-legend { font-size: 0.85em; padding-top: 18px; }
.token-bar { align-items: center; }
.diff { font-size: 0.92em; }
#metrics table td, #metrics table th { font-variant-numeric: tabular-nums; }
#metrics { max-width: 100%; overflow-x: auto; }
@media (max-width: 640px) {
  .gradio-container { padding-left: 6px !important; padding-right: 6px !important; }
  .columns-area { display: flex; flex-direction: column; }
  .columns-area > .cards { display: contents; }
  .token-bar { flex-wrap: wrap; }
  .token-bar > * { flex: 1 1 100% !important; min-width: 0 !important; }
  .presets button { white-space: normal; }
}
/* the beam comparison under the divergence line: a wide table scrolls sideways instead of squeezing into a phone */
#diff table { display: block; overflow-x: auto; max-width: 100%; }
#diff th, #diff td, #diff td code { white-space: nowrap; }
/* a beam hypothesis shows the part that tells it apart; the whole text on hover and on keyboard focus */
#diff .hyp .hyp-full { display: none; }
#diff .hyp:hover .hyp-short, #diff .hyp:focus .hyp-short { display: none; }
#diff .hyp:hover .hyp-full, #diff .hyp:focus .hyp-full { display: inline; }
#diff .hyp[tabindex]:focus { outline: 2px solid var(--color-accent); outline-offset: 1px; }
"""
# a dot in each column's title and a stripe on its output card, in the colour of its line and bar in the plots
# (both follow the column's position: ui.page.layout); on a phone each column's output card follows its settings card
CSS += "".join(f".tint-{i} h3::before {{ content: '●  '; color: {colour}; }}\n"
               f".out-card.tint-{i} {{ border-top: 3px solid {colour}; border-radius: 6px; }}\n"
               f"@media (max-width: 640px) {{ .run-card.card-{i} {{ order: {2 * i}; }} "
               f".out-card.card-{i} {{ order: {2 * i + 1}; }} }}\n" for i, colour in enumerate(PALETTE))
# the sampling cut (ui/cut.py) and the token views' forced (branch) and clicked tokens
CSS += """
.tok { cursor: pointer; }
.tok.forced { background-color: #e5e7eb; color: #111;
              background-image: repeating-linear-gradient(135deg, #e5e7eb 0 4px, #d1d5db 4px 8px);
              border: 1px dashed #6b7280; }
.tok.picked { outline: 2px solid #4f46e5; outline-offset: 1px; }
.cut { font-size: 0.9em; color: var(--body-text-color); }
.cut.empty { color: var(--body-text-color-subdued); }
.cut-head { margin-bottom: 2px; }
.cut-filters { color: var(--body-text-color-subdued); margin-bottom: 4px; }
.cut-legend { font-size: 0.85em; color: var(--body-text-color-subdued); margin-bottom: 4px; }
.cut-key { display: inline-block; width: 14px; height: 8px; border-radius: 2px; margin: 0 4px 0 8px; }
.cut-key.model, .cut-bar.model span { background: #94a3b8; }
.cut-key.drawn, .cut-bar.drawn span { background: #4f46e5; }
.cut-row { display: grid; grid-template-columns: minmax(64px, 10em) 1fr minmax(120px, auto); gap: 8px;
           align-items: center; padding: 3px 6px; border-left: 3px solid transparent; border-radius: 4px; }
.cut-row.drawn { border-left-color: #d97706; background: var(--background-fill-secondary); font-weight: 600; }
.cut-row.removed .cut-token { text-decoration: line-through; opacity: 0.7; }
.cut-token { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.cut-bars { display: grid; grid-template-columns: 1fr 4.2em; gap: 1px 6px; align-items: center; }
.cut-bar { height: 8px; background: var(--background-fill-secondary); border-radius: 2px; overflow: hidden; }
.cut-bar span { display: block; height: 100%; }
.cut-num { font-variant-numeric: tabular-nums; font-size: 0.85em; text-align: right; }
.cut-removed { color: #dc2626; }
.dark .cut-removed { color: #f87171; }  /* the light theme's red is below 4.5:1 on the dark page */
.cut-kept { color: var(--body-text-color-subdued); }
.cut-drawn { color: #d97706; margin-left: 6px; }
.cut-summary { margin-top: 4px; color: var(--body-text-color-subdued); }
.branch-row { align-items: end; }
@media (max-width: 600px) {
  .cut-row { grid-template-columns: minmax(56px, 7em) 1fr; }
  .cut-note { grid-column: 1 / -1; }
}
"""
# The metrics table, wider than a phone's screen (the figures' names and column 1 of 2 fill 390 px), scrolls
# sideways inside itself and shows that it does, in CSS alone: its scroller's position drives two animations, which
# apply only while the table is wider than its box (an inactive scroll timeline applies nothing): a fade at each
# edge with columns behind it, and a line over the table that names the columns. A browser without scroll-driven
# animations ignores animation-timeline and would run them by time, once: the delay (ignored on a scroll timeline)
# with no backwards fill keeps them off there, and the table scrolls as before. Gradio drops @supports and @property
# from the page's CSS, hence no feature query. The line's text stays out of the keyframes: Chrome resolved a var()
# there once, when the animation started, and went on saying "both columns" after a third column's results came.
METRICS_SCROLL_CSS = """
#metrics { timeline-scope: --metrics-x; }
#metrics .virtual-table-viewport { overflow-x: auto; scroll-timeline: --metrics-x x;
    animation: metrics-edges linear forwards; animation-delay: 1000000s; animation-timeline: --metrics-x; }
@keyframes metrics-edges {
  0% { mask-image: linear-gradient(to right, #000 calc(100% - 48px), transparent); }
  3%, 97% { mask-image: linear-gradient(to right, transparent, #000 48px, #000 calc(100% - 48px), transparent); }
  100% { mask-image: linear-gradient(to right, transparent, #000 48px); }
}
#metrics .table-wrap::before { content: var(--metrics-cue, none); display: block; max-height: 0; overflow: hidden;
    opacity: 0; padding: 0 8px; text-align: center; font-size: 0.85em; color: var(--body-text-color-subdued);
    animation: metrics-cue linear forwards; animation-delay: 1000000s; animation-timeline: --metrics-x; }
@keyframes metrics-cue { from, to { max-height: 3em; opacity: 1; padding: 2px 8px; } }
"""
# the line names the columns (the header's cells past the figures' names); none before a run, with one column
METRICS_SCROLL_CSS += "".join(
    f'#metrics:has(thead th:nth-child({count + 1})) {{ --metrics-cue: "{scroll_cue(count)}"; }}\n'
    for count in range(2, MAX_COLUMNS + 1))
CSS += METRICS_SCROLL_CSS
CSS += CACHE_CSS + STEP_CSS
# the sampler lab: a row per stage, its kept ids as bars (scaled to the stage's most likely token)
LAB_CSS = """
.lab-empty { color: var(--body-text-color-subdued); padding: 6px 0; }
.lab-stage { border-top: 1px solid var(--border-color-primary); padding: 6px 0; }
.lab-label { display: flex; flex-wrap: wrap; gap: 4px 12px; align-items: baseline; }
.lab-facts { color: var(--body-text-color-subdued); font-size: 0.9em; font-variant-numeric: tabular-nums; }
.lab-bars { display: flex; flex-wrap: wrap; gap: 2px; align-items: flex-end; margin-top: 4px; }
.lab-bar { display: flex; flex-direction: column; align-items: center; justify-content: flex-end; width: 22px;
    height: 56px; }
.lab-bar span { display: block; width: 14px; min-height: 1px; background: #4f46e5; border-radius: 2px 2px 0 0; }
.dark .lab-bar span { background: #818cf8; }  /* the light theme's indigo is too dark on the dark page */
.lab-bar small { font-size: 0.7em; color: var(--body-text-color-subdued); font-variant-numeric: tabular-nums; }
.lab-bar.lab-rest { width: auto; min-width: 22px; }
.lab-bar.lab-rest span { background: var(--body-text-color-subdued); }
"""
CSS += LAB_CSS


def page_css() -> str:
    """The page's CSS with every registered strategy view's own (read when the page launches, so a strategy
    registered before then brings its look)."""
    return CSS + views_css()
