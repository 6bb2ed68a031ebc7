// The lab (`make lab`) in Debian's headless chromium, clicked as a teacher would.
//
//   node tests/browser/lab.mjs LAB_URL on|off SCREENSHOT.png [TRIES]
//
//   node tests/browser/lab.mjs LAB_URL scenario:ID:yes|no SCREENSHOT.png
//
// Chooses `redis` with fencing on or off, presses start, clicks "pause the holder" and
// then "send the crowd", and waits for the verdict. With fencing off, a pause that missed
// the holder's write (the verdict held) is tried again, up to TRIES crowds (3). Takes a
// screenshot of the page with its verdict, and prints one JSON line: {verdict, failed,
// passed, crowds, faultBands, errors}: the verdict word, the checks that failed and
// passed, how many crowds it sent, the fault bands on the timeline, and any console error
// or request to another origin. Exits 1 when the page cannot be driven. Run by
// lab/tests/lab.rs, which judges it.
//
// With scenario:ID:yes|no, it answers the guided scenario ID's question ("will a unit be
// sold twice?") with yes or no, waits for what happened, and prints {soldTwice, right,
// why, errors} as the scenario's card shows them.
//
// With replay:HISTORY.jsonl, it opens that history in the replay, and reads the red bars
// of its last step and of its first; prints {events, title, redAtEnd, redAtStart, errors}.
import { launch, watchErrors } from "./chromium.mjs";

const [labUrl, fencing, screenshot, tries = "3"] = process.argv.slice(2);
if (!labUrl || !(["on", "off"].includes(fencing) || /^(scenario|replay):/.test(fencing)) || !screenshot) {
  console.error("usage: node lab.mjs LAB_URL on|off|scenario:ID:yes|no|replay:HISTORY.jsonl SCREENSHOT.png [TRIES]");
  process.exit(2);
}
const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1750 }, locale: "en-US" });
  // Loopback only: the lab and its instances.
  const errors = await watchErrors(page, (url) => url.hostname === "127.0.0.1");
  await page.goto(labUrl);
  // The first state drawn (the form then shows the setup that runs, if any).
  await page.waitForFunction(() => document.querySelectorAll("#strategy option").length > 0);
  if (fencing.startsWith("replay:")) {
    await replay(page, fencing.slice("replay:".length), errors);
    process.exit(process.exitCode ?? 0);
  }
  if (fencing.startsWith("scenario:")) {
    await guided(page, fencing.split(":")[1], fencing.split(":")[2] === "yes", errors);
    process.exit(process.exitCode ?? 0);
  }
  await page.selectOption("#strategy", "redis");
  await page.setChecked("#fencing", fencing === "on");
  await page.click("#start");
  await page.waitForFunction(() => document.querySelectorAll("#instances tr").length === 2, null, { timeout: 60_000 });
  let verdict, crowds = 0;
  for (let crowd = 1; crowd <= Number(tries); crowd++) {
    crowds = crowd;
    const before = await page.evaluate(async () => (await (await fetch("/state")).json()).crowds_sent);
    await page.click("#pause-holder");
    await page.click("#send-crowd");
    await page.waitForFunction((number) => {
      const shown = document.getElementById("verdict");
      return shown.dataset.crowd === String(number) && shown.dataset.verdict !== undefined
        && !shown.classList.contains("running");
    }, before + 1, { timeout: 120_000, polling: 250 });
    verdict = await page.getAttribute("#verdict", "data-verdict");
    if (fencing === "on" || verdict !== "held") break;
  }
  const failed = await page.$$eval("#checks li.fail", (items) => items.map((item) => item.dataset.check));
  const passed = await page.$$eval("#checks li.pass", (items) => items.map((item) => item.dataset.check));
  // The timeline of the ended crowd, with its checks and the pause as a band.
  await page.waitForFunction(() => {
    const frame = document.getElementById("timeline").contentDocument;
    const heading = frame?.querySelector("h1")?.textContent ?? "";
    return heading.includes("the history of one run") && frame.querySelectorAll("rect.fault").length > 0;
  }, null, { timeout: 10_000 });
  await page.waitForTimeout(300); // the frame's scroll to its first red bar
  const faultBands = await page.evaluate(() =>
    document.getElementById("timeline").contentDocument.querySelectorAll("rect.fault").length);
  await page.screenshot({ path: screenshot }); // the top: the switches, the faults, the verdict, the history
  console.log(JSON.stringify({ verdict, failed, passed, crowds, faultBands, errors }));
} catch (error) {
  const shown = await browser.contexts()[0]?.pages()[0]?.evaluate(() =>
    `${document.getElementById("verdict").textContent} | ${document.getElementById("message").textContent}`).catch(() => "");
  console.error(`lab: ${error.message}; the page said: ${shown}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}

/** The guided scenario `id`, predicted `yes` or not, through its card. */
async function guided(page, id, yes, errors) {
  const card = page.locator(`.scenario[data-scenario="${id}"]`);
  await card.locator(yes ? ".predict-yes" : ".predict-no").click();
  const result = page.locator(`.scenario[data-scenario="${id}"] .result[data-sold-twice]`);
  await result.waitFor({ timeout: 180_000 });
  const soldTwice = (await result.getAttribute("data-sold-twice")) === "yes";
  const right = (await result.getAttribute("class")).includes("right");
  const why = await page.locator(`.scenario[data-scenario="${id}"] .why`).textContent();
  await page.screenshot({ path: screenshot });
  console.log(JSON.stringify({ soldTwice, right, why, errors }));
  await browser.close();
}

/** The history at `path` in the replay: its last step, then its first. */
async function replay(page, path, errors) {
  await page.setInputFiles("#replay-file", path);
  const frame = () => page.frameLocator("#replay-frame");
  const title = async () => (await frame().locator("h1").textContent()).trim();
  await page.waitForFunction(() => (document.getElementById("replay-frame").srcdoc ?? "").includes("replay:"));
  const events = Number(await page.getAttribute("#replay-at", "max"));
  const end = { title: await title(), red: await frame().locator("rect.violation").count() };
  await page.evaluate(() => {
    const slider = document.getElementById("replay-at");
    slider.value = "0";
    slider.dispatchEvent(new Event("input"));
  });
  await page.waitForFunction(() => document.getElementById("replay-frame").srcdoc.includes("replay: 0 of"));
  const redAtStart = await frame().locator("rect.violation").count();
  await page.screenshot({ path: screenshot });
  console.log(JSON.stringify({ events, title: end.title, redAtEnd: end.red, redAtStart, errors }));
  await browser.close();
}
