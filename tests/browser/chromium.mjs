// The one way the browser tests start Debian's headless chromium (CHROMIUM names
// another), through playwright-core.
import { chromium } from "playwright-core";

/** A headless chromium that stays off the network. */
export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    // Root in a container needs --no-sandbox; the rest keep chromium off the network.
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync"],
  });
}

/**
 * What went wrong in `page`, as it happens: uncaught errors, console errors, and each
 * request to an address `allowed` refuses, which is aborted. The caller reports the list.
 */
export async function watchErrors(page, allowed) {
  const errors = [];
  page.on("pageerror", (error) => errors.push(`page error: ${error.message}`));
  page.on("console", (message) => message.type() === "error" && errors.push(`console: ${message.text()}`));
  await page.route((url) => !allowed(url), (route) => {
    errors.push(`fetched ${route.request().url()}`);
    return route.abort();
  });
  return errors;
}
