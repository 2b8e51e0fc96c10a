// Every visible text against its effective background: [{text, ratio, color, background, id, token}].
// The background is the element's own and its ancestors' background colours, composited until one is opaque
// (over the page's root background). An element's opacity (and its ancestors') thins its text colour over that
// background, as the browser draws it: a faded text is measured as faded, never skipped. Disabled controls are
// left out (WCAG exempts inactive components).
() => {
  const parse = (value) => {
    const m = value.match(/rgba?\(([^)]+)\)/);
    if (!m) { return null; }
    const parts = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
    return [parts[0], parts[1], parts[2], parts.length > 3 ? parts[3] : 1];
  };
  const over = (top, bottom) => {
    const a = top[3] + bottom[3] * (1 - top[3]);
    if (a === 0) { return [0, 0, 0, 0]; }
    return [0, 1, 2].map((i) => (top[i] * top[3] + bottom[i] * bottom[3] * (1 - top[3])) / a).concat([a]);
  };
  const luminance = (c) => {
    const [r, g, b] = c.slice(0, 3).map((v) => {
      const s = v / 255;
      return s <= 0.03928 ? s / 12.92 : Math.pow((s + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const root = parse(getComputedStyle(document.body).backgroundColor) || [255, 255, 255, 1];
  const background = (element) => {
    const layers = [];
    for (let node = element; node && node.nodeType === 1; node = node.parentElement) {
      const style = getComputedStyle(node);
      const colour = parse(style.backgroundColor);
      if (colour && colour[3] > 0) { layers.push(colour); if (colour[3] >= 1) { break; } }
    }
    let result = layers.length && layers[layers.length - 1][3] >= 1 ? layers.pop() : over(root, [255, 255, 255, 1]);
    while (layers.length) { result = over(layers.pop(), result); }
    return result;
  };
  const faded = (element) => {
    for (let node = element; node && node.nodeType === 1; node = node.parentElement) {
      const style = getComputedStyle(node);
      if (style.visibility === 'hidden' || style.display === 'none') { return true; }
      if (node.disabled || node.getAttribute('aria-disabled') === 'true') { return true; }
    }
    return false;
  };
  const opacity = (element) => {
    let product = 1;
    for (let node = element; node && node.nodeType === 1; node = node.parentElement) {
      product *= Number(getComputedStyle(node).opacity);
    }
    return product;
  };
  const thinned = (colour, element) => colour.slice(0, 3).concat([colour[3] * opacity(element)]);
  const found = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const seen = new Set();
  for (let text = walker.nextNode(); text; text = walker.nextNode()) {
    const element = text.parentElement;
    if (!text.textContent.trim() || !element || seen.has(element)) { continue; }
    seen.add(element);
    if (['SCRIPT', 'STYLE', 'NOSCRIPT', 'OPTION', 'TITLE'].includes(element.tagName)) { continue; }
    const rect = element.getBoundingClientRect();
    if (rect.width === 0 || rect.height === 0 || faded(element)) { continue; }
    const style = getComputedStyle(element);
    const svg = element instanceof SVGElement;
    const parsed = parse(svg ? style.fill : style.color);
    if (!parsed) { continue; }
    const fg = thinned(parsed, element);
    const bg = background(element);
    const shown = over(fg, bg);
    const [hi, lo] = [luminance(shown), luminance(bg)].sort((a, b) => b - a);
    found.push({text: text.textContent.trim().slice(0, 40), ratio: (hi + 0.05) / (lo + 0.05),
                color: svg ? style.fill : style.color, background: `rgb(${bg.slice(0, 3).map(Math.round)})`,
                id: element.closest('[id]')?.id || '', token: element.classList.contains('tok')});
  }
  // textareas and inputs hold their text in a value, not a text node
  for (const field of document.querySelectorAll('textarea, input[type=text], input[type=number]')) {
    const rect = field.getBoundingClientRect();
    if (!field.value.trim() || rect.width === 0 || faded(field)) { continue; }
    const fg = thinned(parse(getComputedStyle(field).color), field);
    const bg = background(field);
    const [hi, lo] = [luminance(over(fg, bg)), luminance(bg)].sort((a, b) => b - a);
    found.push({text: field.value.trim().slice(0, 40), ratio: (hi + 0.05) / (lo + 0.05),
                color: getComputedStyle(field).color, background: `rgb(${bg.slice(0, 3).map(Math.round)})`,
                id: field.closest('[id]')?.id || ''});
  }
  return found;
}
