// Every rule of a widget's stylesheet applies inside that widget's root element only, so two widgets on one
// page (the builder and the dashboard its Train opens, side by side) never style each other or JupyterLab.
// The built bundles are checked too when they exist: a library's stylesheet that comes with a widget
// (React Flow's, in the builder) must keep to its own namespace.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const static_ = path.join(here, "..", "..", "amp_notebook", "ui", "static");

// The selectors of every style rule in `css` (inside @media/@supports too; @keyframes steps are not rules).
export function selectors(css) {
  const text = css.replace(/\/\*[\s\S]*?\*\//g, "");
  const found = [];
  const walk = (from, to) => {
    let i = from;
    while (i < to) {
      const open = text.indexOf("{", i);
      if (open < 0 || open >= to) return;
      const head = text.slice(i, open).trim();
      let depth = 1;
      let j = open + 1;
      while (j < to && depth > 0) {
        if (text[j] === "{") depth++;
        else if (text[j] === "}") depth--;
        j++;
      }
      if (head.startsWith("@media") || head.startsWith("@supports")) walk(open + 1, j - 1);
      else if (!head.startsWith("@")) found.push(...head.split(",").map((s) => s.trim()).filter(Boolean));
      i = j;
    }
  };
  walk(0, text.length);
  return found;
}

function unscoped(css, roots) {
  return selectors(css).filter((s) => !roots.some((root) => s === root || s.startsWith(`${root} `) || s.startsWith(`${root}.`) || s.startsWith(`${root}:`)));
}

test("selectors are read from rules, media blocks included, comments and keyframes left out", () => {
  const css = "/* a, b { } */ .x .a, .x .b { color: red } @media (min-width: 1px) { .x p { margin: 0 } } @keyframes k { from { opacity: 0 } }";
  assert.deepEqual(selectors(css), [".x .a", ".x .b", ".x p"]);
  assert.deepEqual(unscoped(".x .a, .y .b {}", [".x"]), [".y .b"]);
});

for (const [widget, file, root] of [
  ["builder", path.join(here, "..", "src", "builder", "styles.css"), ".amp-builder"],
  ["dashboard", path.join(here, "..", "src", "dashboard", "style.css"), ".amp-dashboard"],
]) {
  test(`the ${widget}'s stylesheet styles nothing outside ${root}`, () => {
    const css = readFileSync(file, "utf8");
    assert.ok(selectors(css).length > 10);
    assert.deepEqual(unscoped(css, [root]), []);
  });
}

// React Flow's own stylesheet is namespaced by its class prefix (.react-flow, svg.react-flow__...)
for (const [bundle, roots] of [
  ["builder.css", [".amp-builder", ".react-flow", "svg.react-flow"]],
  ["dashboard.css", [".amp-dashboard"]],
]) {
  const file = path.join(static_, bundle);
  test(`the built ${bundle} styles nothing outside its widget`, { skip: !existsSync(file) && "not built" }, () => {
    const bad = unscoped(readFileSync(file, "utf8"), roots).filter((s) => !/^(svg)?\.react-flow__/.test(s));
    assert.deepEqual(bad, []);
  });
}
