// Launch the system Chromium through playwright-core (it never downloads a browser).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
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
 * as figures arrive, and a node replaced while Playwright shoots it is "not attached to the DOM" or, when it is
 * detached between Playwright's checks and its scroll, "not visible or not an HTMLElement". Tries again after a
 * short pause (the locator finds the new node), at most `attempts` times. */
export async function steadyScreenshot(locator, options, attempts = 8) {
  const replaced = /not attached to the DOM|not visible or not an HTMLElement/;
  for (let attempt = 1; ; attempt++) {
    try {
      return await locator.screenshot(options);
    } catch (error) {
      if (attempt >= attempts || !replaced.test(String(error))) {
        throw error;
      }
      await new Promise(resolve => setTimeout(resolve, 100));
    }
  }
}

/** Keep JupyterLab's notifications (its news question, toasts) out of the pictures: they float over the views. */
export async function hideToasts(page) {
  await page.addStyleTag({ content: '.Toastify { display: none !important; }' });
}

/** Switch JupyterLab to its light or dark theme (`theme`: "light" or "dark") and wait until it has drawn it. */
export async function setTheme(page, theme) {
  const name = theme === 'dark' ? 'JupyterLab Dark' : 'JupyterLab Light';
  await page.evaluate(n => window.jupyterapp.commands.execute('apputils:change-theme', { theme: n }), name);
  await page.waitForFunction(light => document.body.dataset.jpThemeLight === light, String(theme !== 'dark'), {
    timeout: 30000
  });
  await page.waitForSelector('#jupyterlab-splash', { state: 'detached', timeout: 30000 });
  await page.waitForTimeout(800);
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

/** The documentation's pictures, taken by the browser tests on every run: docs/_build/screenshots/<view>-<theme>.png
 * (git ignores it: a test run leaves the committed docs/_static/screenshots as they are). The docs build shows these
 * where they are, else the committed ones; docs/_static/screenshots/README.md lists them and says how to commit
 * new ones. */
export const DOCS_SCREENSHOTS = fileURLToPath(new URL('../../docs/_build/screenshots/', import.meta.url));

/** Copy the screenshot at `file` to the documentation's picture of `view` in `theme` ("light" or "dark"). */
export function docsPicture(file, view, theme) {
  fs.mkdirSync(DOCS_SCREENSHOTS, { recursive: true });
  fs.copyFileSync(file, path.join(DOCS_SCREENSHOTS, `${view}-${theme}.png`));
}
