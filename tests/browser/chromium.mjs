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
