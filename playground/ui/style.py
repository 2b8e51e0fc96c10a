"""The page's look (theme, CSS) and the one line of JS that writes the settings into the address bar."""

from __future__ import annotations

import gradio as gr

from playground.ui.plots import PALETTE

THEME = gr.themes.Default(primary_hue="indigo", secondary_hue="slate", neutral_hue="slate", radius_size="md",
                       font=["system-ui", "Segoe UI", "Helvetica Neue", "Arial", "sans-serif"],
                       font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "monospace"]).set(
    block_padding="8px 10px", layout_gap="10px", form_gap_width="6px")

# history.replaceState: the address changes without a reload or a new history entry, so Back still leaves
WRITE_URL_JS = """(token) => {
  const url = new URL(window.location.href);
  if (token) { url.searchParams.set('s', token); } else { url.searchParams.delete('s'); }
  window.history.replaceState(null, '', url);
}"""

CSS = """
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
.tokens { font-family: var(--font-mono); font-size: 0.86em; line-height: 1.9; max-height: 260px;
          overflow-y: auto; padding: 6px; border: 1px solid var(--border-color-primary); border-radius: 8px;
          background: var(--background-fill-primary); color: #111; }
.tokens.empty { color: var(--body-text-color-subdued); font-family: var(--font); }
.tok { padding: 1px 1px; margin: 0 1px 0 0; border-radius: 3px; white-space: pre-wrap; cursor: help; color: #111; }
.tok.draft { border-bottom: 3px solid #2563eb; }
.tok.diverge { outline: 2px solid #dc2626; outline-offset: 1px; }
.tok-legend { font-size: 0.85em; padding-top: 18px; }
.token-bar { align-items: center; }
.diff { font-size: 0.92em; }
#metrics table td, #metrics table th { font-variant-numeric: tabular-nums; }
.beam-view { font-size: 0.86em; color: var(--body-text-color); }
.beam-view ol { margin: 2px 0 4px 1.2em; padding: 0; }
.beam-legend { color: var(--body-text-color-subdued); margin-bottom: 4px; }
.beam-legend .chosen { color: #b45309; font-weight: 600; }
.beam-legend .pruned { opacity: 0.55; }
.beam-scroll { overflow-x: auto; max-width: 100%; border: 1px solid var(--border-color-primary); border-radius: 8px;
               background: var(--background-fill-primary); }
.beam-svg text { font-family: var(--font-mono); font-size: 11px; fill: var(--body-text-color); }
.beam-svg text.score { font-size: 9px; fill: var(--body-text-color-subdued); }
.beam-svg rect { fill: var(--background-fill-secondary); stroke: var(--border-color-primary); }
.beam-node.kept rect { stroke: var(--body-text-color-subdued); }
.beam-node.pruned { opacity: 0.45; }
.beam-node.finished rect { stroke-width: 2; stroke-dasharray: 3 2; }
.beam-node.chosen rect { fill: #fde68a; stroke: #b45309; stroke-width: 2; }
.beam-node.chosen text { fill: #111; }
.beam-edge { stroke: var(--border-color-primary); stroke-width: 1; }
.beam-edge.kept { stroke: var(--body-text-color-subdued); }
.beam-edge.pruned { opacity: 0.45; }
.beam-edge.chosen { stroke: #b45309; stroke-width: 2.5; }
"""
# a dot in each column's title, in the colour of its line in the plots
CSS += "".join(f".slot-{i} h3::before {{ content: '●  '; color: {colour}; }}\n" for i, colour in enumerate(PALETTE))
