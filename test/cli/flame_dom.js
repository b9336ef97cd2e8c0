// flame_dom.js — runs the script of a profmalloc flame graph under a small
// stand-in for the browser's DOM (node has none), then clicks a frame and
// searches, and prints what the script did as JSON for test_cli.py.
// Usage: node flame_dom.js FRAMES.json SCRIPT.js NAME-TO-CLICK REGEX
'use strict';
const fs = require('fs');
const [framesPath, scriptPath, clickName, regex] = process.argv.slice(2);
const frames = JSON.parse(fs.readFileSync(framesPath, 'utf8'));

function el(attrs, text) {
  const e = {
    attrs: Object.assign({}, attrs), style: {}, textContent: text || '', listeners: {}, kids: {},
    getAttribute(k) { return k in this.attrs ? String(this.attrs[k]) : null; },
    setAttribute(k, v) { this.attrs[k] = v; },
    addEventListener(t, f) { this.listeners[t] = f; },
    querySelector(sel) { return this.kids[sel]; },
  };
  return e;
}
const svg = el({'data-w': frames.w, 'data-total': frames.total});
const gs = frames.frames.map(f => {
  const g = el({'data-d': f.d, 'data-x': f.x, 'data-v': f.v, 'class': 'f'});
  g.kids.rect = el({x: f.rx, width: f.rw, fill: 'rgb(1,2,3)'});
  g.kids.text = el({x: f.rx + 3}, '');
  g.kids.title = el({}, f.title);
  g.name = f.name;
  return g;
});
const byId = {details: el({}), matched: el({}), unzoom: el({}), search: el({})};
global.document = {
  documentElement: svg,
  querySelectorAll: sel => (sel === 'g.f' ? gs : []),
  getElementById: id => byId[id],
};
global.prompt = () => regex;
global.alert = m => { throw new Error('alert: ' + m); };
eval(fs.readFileSync(scriptPath, 'utf8'));
const target = gs.find(g => g.name === clickName);
target.listeners.mouseover();
const hovered = byId.details.textContent;
target.listeners.click();
const after = gs.map(g => ({name: g.name, shown: g.style.display !== 'none',
                            x: +g.kids.rect.getAttribute('x'), w: +g.kids.rect.getAttribute('width'),
                            label: g.kids.text.textContent}));
byId.search.listeners.click();
const matched = byId.matched.textContent;
const highlighted = gs.filter(g => g.kids.rect.getAttribute('fill') === 'rgb(230,0,230)').map(g => g.name);
byId.unzoom.listeners.click();
const reset = gs.filter(g => g.style.display === 'none').length;
console.log(JSON.stringify({hovered, after, matched, highlighted, reset}));
