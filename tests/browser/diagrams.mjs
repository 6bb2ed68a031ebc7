// The docs' Mermaid diagrams, rendered by Mermaid itself in Debian's headless chromium.
//
//   node tests/browser/diagrams.mjs < diagrams.json
//
// Reads a JSON list of diagrams, `[{"page": "README.md", "line": 12, "source": "flowchart LR ...",
// "labels": ["load test", ...]}]`, loads Mermaid's browser bundle (pinned in package-lock.json)
// into a blank page and renders each diagram with `mermaid.render`, as GitHub does when it
// shows the page. Each picture must have nodes and show every label its source has.
// Prints `rendered N diagrams` and exits 0. Exits 1 naming every diagram that failed:
// `page:line: Mermaid's error`, at the line of the error when Mermaid gives one.
// Run by tests/diagrams.rs, which finds the diagrams.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { launch } from "./chromium.mjs";

// The self-contained browser bundle: it sets `mermaid` on the page and fetches nothing.
const MERMAID = createRequire(import.meta.url).resolve("mermaid/dist/mermaid.min.js");

const diagrams = JSON.parse(readFileSync(0, "utf8"));
if (!Array.isArray(diagrams) || diagrams.length === 0) {
  console.error("diagrams: no diagrams on stdin; expected a JSON list of {page, line, source, labels}");
  process.exit(2);
}

const browser = await launch();
let failures;
try {
  const page = await browser.newPage();
  // Nothing may come from the network: the bundle is read from node_modules.
  await page.route("**/*", (route) => route.abort());
  await page.setContent("<!doctype html><html><body></body></html>");
  await page.addScriptTag({ path: MERMAID });
  failures = await page.evaluate(async (diagrams) => {
    // startOnLoad off: nothing renders but what is asked for, one diagram at a time.
    window.mermaid.initialize({ startOnLoad: false, securityLevel: "strict" });
    const failed = [];
    for (const [index, diagram] of diagrams.entries()) {
      try {
        const { svg } = await window.mermaid.render(`diagram-${index}`, diagram.source);
        // Mermaid draws some syntax errors as a picture instead of throwing.
        if (svg.includes("Syntax error in text")) throw new Error("Mermaid drew its syntax-error picture");
        // The picture has boxes (a flowchart's nodes, a sequence's participants) and shows
        // every label of its source. (Read as HTML: a flowchart's labels hold `<br>`, which
        // XML refuses.)
        const picture = new DOMParser().parseFromString(svg, "text/html").querySelector("svg");
        const nodes = picture.querySelectorAll("g.node, rect.actor").length;
        if (nodes === 0) throw new Error("Mermaid drew no node and no participant");
        // Every text of the picture in order, as one line: Mermaid breaks a long label
        // over several texts, one after the other.
        const parts = [];
        const walker = document.createTreeWalker(picture, NodeFilter.SHOW_TEXT);
        while (walker.nextNode()) {
          if (walker.currentNode.parentElement.tagName !== "style") parts.push(walker.currentNode.textContent);
        }
        const shown = parts.join(" ").replace(/\s+/g, " ");
        const missing = diagram.labels.filter((label) => !shown.includes(label));
        if (missing.length) throw new Error(`the picture lacks ${missing.map((label) => JSON.stringify(label)).join(", ")}`);
      } catch (error) {
        failed.push({ ...diagram, error: String(error?.message ?? error) });
      }
      // A failed render can leave its half-drawn element behind.
      document.getElementById(`ddiagram-${index}`)?.remove();
    }
    return failed;
  }, diagrams);
} finally {
  await browser.close();
}
if (failures.length) {
  for (const { page, line, error } of failures) {
    // `line` is the fence's; Mermaid counts the diagram's own lines, from the one after it.
    const at = /on line (\d+)/.exec(error);
    const where = at ? `${page}:${line + Number(at[1])} (the diagram whose fence opens at line ${line})` : `${page}:${line}`;
    console.error(`${where}: ${error.trim()}`);
  }
  console.error(`diagrams: ${failures.length} of ${diagrams.length} failed to render`);
  process.exit(1);
}
console.log(`rendered ${diagrams.length} diagrams`);
