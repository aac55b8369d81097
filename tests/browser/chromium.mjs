// Launch the system Chromium through playwright-core (it never downloads a browser).
import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';

export function launch() {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run'
    ]
  });
}

/** A screenshot of `locator` that survives the panel re-rendering it meanwhile: the live views replace their nodes
 * as figures arrive, and a node replaced while Playwright shoots it is "not attached to the DOM". Tries again (the
 * locator finds the new node), at most `attempts` times. */
export async function steadyScreenshot(locator, options, attempts = 5) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await locator.screenshot(options);
    } catch (error) {
      if (attempt >= attempts || !/not attached to the DOM/.test(String(error))) {
        throw error;
      }
    }
  }
}

/** Open `notebook` in JupyterLab at `base` and wait until its kernel is idle. */
export async function openNotebook(page, base, token, notebook) {
  await page.goto(`${base}lab/tree/${notebook}?token=${token}`);
  await page.waitForSelector('#main', { timeout: 120000 });
  await page.waitForFunction(
    () => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle',
    null,
    { timeout: 120000 }
  );
}
