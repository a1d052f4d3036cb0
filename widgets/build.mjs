// Bundles each widget's front end into one ES module inside the Python package (amp_notebook/ui/static/),
// where the anywidget classes read it. Run by the Python build (hatch-jupyter-builder) at install time:
// the bundles are build outputs and are not committed.
import * as esbuild from "esbuild";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const outdir = path.join(here, "..", "amp_notebook", "ui", "static");

const options = {
  entryPoints: {
    dashboard: path.join(here, "src", "dashboard", "index.js"),
    builder: path.join(here, "src", "builder", "index.jsx"),
  },
  outdir,
  bundle: true,
  format: "esm",
  target: ["es2020"],
  minify: !process.argv.includes("--dev"),
  sourcemap: false,
  jsx: "automatic",
  loader: { ".css": "css" },
  define: { "process.env.NODE_ENV": '"production"' },
  logLevel: "info",
};

if (process.argv.includes("--watch")) {
  const ctx = await esbuild.context(options);
  await ctx.watch();
} else {
  await esbuild.build(options);
}
