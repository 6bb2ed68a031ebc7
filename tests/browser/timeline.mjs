// A run's timeline (`run.history.html`, drawn by loadtest/src/render/timeline.rs) in
// Debian's headless chromium.
//
//   node tests/browser/timeline.mjs PAGE
//
// Opens the page from disk with every other address refused, counts the red bars (the
// requests that fail a check) and the fault bands, reads the first red bar's colour and
// what a hover shows, clicks the link to it and says whether the bar is then in view.
// Prints one JSON line: {violations, faults, fill, hover, hash, in_view_before, in_view,
// errors}; exits 1 when the page cannot be opened. Run by tests/it/chaos/timeline.rs, which judges it.
import { pathToFileURL } from "node:url";
import { launch, watchErrors } from "./chromium.mjs";

const file = process.argv[2];
if (!file) {
  console.error("timeline: give the path of a run's history.html");
  process.exit(2);
}

const browser = await launch();
try {
  // Short, so that the checks' table above the plot pushes the bars below the fold.
  const page = await browser.newPage({ viewport: { width: 1400, height: 300 } });
  // The page must need nothing but itself.
  const errors = await watchErrors(page, (url) => url.protocol === "file:");
  await page.goto(pathToFileURL(file).href);
  const violations = await page.locator("rect.violation").count();
  const faults = await page.locator("rect.fault").count();
  const first = page.locator("#first-violation");
  const fill = await first.getAttribute("fill");
  const hover = await first.locator("title").textContent();
  // Whether the first red bar shows, once what was asked is drawn (two frames later).
  const shown = () => page.evaluate(async () => {
    await new Promise((drawn) => requestAnimationFrame(() => requestAnimationFrame(drawn)));
    const bar = document.getElementById("first-violation").getBoundingClientRect();
    return bar.bottom > 0 && bar.top < window.innerHeight;
  });
  const in_view_before = await shown();
  await page.click("a[href='#first-violation']");
  const in_view = await shown();
  const hash = await page.evaluate(() => location.hash);
  console.log(JSON.stringify({ violations, faults, fill, hover, hash, in_view_before, in_view, errors }));
} catch (error) {
  console.error(`timeline: ${error.message}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
