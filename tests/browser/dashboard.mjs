// The dashboard in a real browser: Debian's headless chromium, driven by playwright-core.
//
//   node tests/browser/dashboard.mjs PAGE_URL BUY_URL[,BUY_URL...] SCREENSHOT.png
//
// Opens PAGE_URL, waits for the first event, buys a few units through every BUY_URL
// (the instances), and checks that the page follows: stock down, lucky up, each
// instance's sales counted and drawn on the timeline; no console error, no failed
// request, nothing fetched from another origin. Takes a screenshot, exits 0; exits 1
// naming what the page got wrong. Run by tests/dashboard.rs inside `make test`.
import { launch } from "./chromium.mjs";

const [pageUrl, buyUrls, screenshot] = process.argv.slice(2);
if (!pageUrl || !buyUrls || !screenshot) {
  console.error("usage: node dashboard.mjs PAGE_URL BUY_URL[,BUY_URL...] SCREENSHOT.png");
  process.exit(2);
}
const instances = buyUrls.split(",");
const UNITS_PER_INSTANCE = 6;

const problems = [];
const fail = (what) => {
  problems.push(what);
};

const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1200, height: 820 } });
  const origin = new URL(pageUrl).origin;
  page.on("console", (message) => {
    if (message.type() === "error") fail(`console error: ${message.text()}`);
  });
  page.on("pageerror", (error) => fail(`uncaught error in the page: ${error.message}`));
  page.on("requestfailed", (request) => {
    // The event stream is cut when the browser closes; that is not the page's fault.
    if (!request.url().endsWith("/events")) fail(`request failed: ${request.url()}`);
  });
  page.on("request", (request) => {
    if (!request.url().startsWith(origin)) fail(`the page fetched from another origin: ${request.url()}`);
  });

  await page.goto(pageUrl);
  await page.waitForFunction(() => /^\d+$/.test(document.getElementById("stock").textContent), null, { timeout: 10000 });
  const read = () => page.evaluate(() => ({
    stock: Number(document.getElementById("stock").textContent),
    lucky: Number(document.getElementById("lucky").textContent),
    strategy: document.getElementById("strategy").textContent,
    status: document.getElementById("status").textContent,
    marks: document.querySelectorAll("#timeline rect.sale").length,
    soldBy: Object.fromEntries([...document.querySelectorAll("#sold-by-instance tr")]
      .map((row) => [row.dataset.label, Number(row.lastChild.textContent)])),
  }));
  const before = await read();
  if (before.status !== "live") fail(`the status reads "${before.status}", not "live"`);

  // Buy one unit at a time from each instance in turn, so the lock passes between them.
  for (let round = 0; round < UNITS_PER_INSTANCE; round++) {
    for (const instance of instances) {
      const answer = await fetch(`${instance}/stock/reduce`);
      if (!answer.ok) fail(`buying through ${instance} answered ${answer.status}`);
    }
  }
  const bought = UNITS_PER_INSTANCE * instances.length;
  try {
    await page.waitForFunction(
      ([stock, lucky]) => Number(document.getElementById("stock").textContent) === stock
        && Number(document.getElementById("lucky").textContent) === lucky,
      [before.stock - bought, before.lucky + bought],
      { timeout: 5000 },
    );
  } catch {
    fail(`the numbers did not follow the sales: expected stock ${before.stock - bought} and lucky ${before.lucky + bought}`);
  }
  const after = await read();
  // Every unit once: the page's own count before, and exactly what was bought since.
  if (after.marks !== before.marks + bought) {
    fail(`the timeline shows ${after.marks} units, expected ${before.marks} before and ${bought} bought since`);
  }
  const lanes = Object.keys(after.soldBy);
  if (lanes.length !== instances.length) fail(`sales are counted for ${lanes.length} instances, expected ${instances.length}: ${JSON.stringify(after.soldBy)}`);
  for (const [instance, n] of Object.entries(after.soldBy)) {
    const expected = (before.soldBy[instance] ?? 0) + UNITS_PER_INSTANCE;
    if (n !== expected) fail(`${instance} is counted ${n} sales, expected ${expected}`);
  }
  await page.waitForTimeout(600); // a few more ticks, so the stock line has a slope
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(JSON.stringify({ before, after }));
} finally {
  await browser.close();
}
if (problems.length) {
  for (const problem of problems) console.error(`dashboard: ${problem}`);
  process.exit(1);
}
