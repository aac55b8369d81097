// %gpumonitor as a user sees it in a 1400 px window with the left sidebar open at its default width, in the light
// and dark themes: for each notebook given (one with 2 simulated GPUs, one with 4), run it, then check that no cell
// of the live panel wraps onto a second line and that nothing overflows the output area; then the cell summary's
// host-CPU chart has its line. Screenshots go to $ARTIFACTS as monitor-<notebook>-<theme>.png.
// Usage: node monitor_view.mjs BASE_URL TOKEN NOTEBOOK...
import fs from 'node:fs';
import path from 'node:path';
import { docsPicture, hideToasts, launch, steadyScreenshot } from './chromium.mjs';

const [base, token, ...notebooks] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
fs.mkdirSync(artifacts, { recursive: true });
const step = message => console.log(`[monitor] ${message}`);

/** Open `notebook` in a workspace of its own (the previous notebook, its kernel shut down, is not restored beside
 * it) and wait until its kernel is idle. */
async function openInWorkspace(page, notebook, workspace) {
  await page.goto(`${base}lab/workspaces/${workspace}/tree/${notebook}?token=${token}`);
  await page.waitForSelector('#main', { timeout: 120000 });
  await page.waitForFunction(
    () => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle',
    null,
    { timeout: 120000 }
  );
}

async function openSidebar(page) {
  await page.evaluate(async () => {
    await window.jupyterapp.restored;
    window.jupyterapp.shell.activateById('filebrowser');
  });
  await page.waitForFunction(() => !window.jupyterapp.shell.leftCollapsed, null, { timeout: 30000 });
  const width = await page.evaluate(() => {
    const panel = document.querySelector('#jp-left-stack');
    return panel ? panel.getBoundingClientRect().width : 0;
  });
  step(`left sidebar ${Math.round(width)} px wide`);
  if (width < 150 || width > 320) throw new Error(`the left sidebar is ${width} px: not open at its default width`);
}

async function setTheme(page, theme) {
  const name = theme === 'dark' ? 'JupyterLab Dark' : 'JupyterLab Light';
  await page.evaluate(n => window.jupyterapp.commands.execute('apputils:change-theme', { theme: n }), name);
  await page.waitForFunction(light => document.body.dataset.jpThemeLight === light, String(theme !== 'dark'), {
    timeout: 60000
  });
  await page.waitForTimeout(1000);
}

/** Every cell of the live panel (and the summary's) that spans more than one line, and any output wider than the
 * output area. */
async function layoutProblems(page) {
  return page.evaluate(() => {
    const problems = [];
    const lineHeight = element => {
      const style = getComputedStyle(element);
      const height = parseFloat(style.lineHeight);
      return Number.isFinite(height) ? height : 1.3 * parseFloat(style.fontSize);
    };
    const notebook = window.jupyterapp.shell.currentWidget.node;
    const views = '.jp-OutputArea-output .gpu-magics-monitor, .jp-OutputArea-output .gpu-magics-cell-monitor';
    for (const panel of notebook.querySelectorAll(views)) {
      const area = panel.closest('.jp-OutputArea-output');
      const room = area.getBoundingClientRect().width;
      if (panel.scrollWidth > room + 1 || panel.scrollWidth > panel.clientWidth + 1) {
        problems.push(`a panel is ${panel.scrollWidth} px wide in ${Math.round(room)} px`);
      }
      for (const cell of panel.querySelectorAll('td, th, .gpu-magics-host')) {
        const box = cell.getBoundingClientRect();
        const text = (cell.textContent || '').trim();
        if (!text) continue;
        const texts = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
        let lines = 1;
        for (let node = texts.nextNode(); node; node = texts.nextNode()) {
          if (!(node.textContent || '').trim()) continue;
          const range = document.createRange();
          range.selectNodeContents(node);
          lines = Math.max(lines, new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top))).size);
        }
        if (lines > 1 || box.height > 2.2 * lineHeight(cell)) problems.push(`"${text}" wraps`);
      }
    }
    return problems;
  });
}

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const problems = [];
  try {
    for (const notebook of notebooks) {
      const stem = notebook.replace(/\.ipynb$/, '');
      step(`${notebook}: loading`);
      await openInWorkspace(page, notebook, stem);
      await hideToasts(page);
      await openSidebar(page);
      const here = `#${await page.evaluate(() => window.jupyterapp.shell.currentWidget.id)}`; // this notebook
      await page.evaluate(() => void window.jupyterapp.commands.execute('notebook:run-all-cells'));
      await page.waitForFunction(
        () => {
          const notebook = window.jupyterapp.shell.currentWidget.node;
          const prompts = Array.from(notebook.querySelectorAll('.jp-CodeCell .jp-InputPrompt'));
          return prompts.length > 0 && prompts.every(p => /\[\d+\]/.test(p.textContent || ''));
        },
        null,
        { timeout: 240000 }
      );
      await page.waitForSelector(`${here} .jp-OutputArea-output .gpu-magics-monitor table`, { timeout: 60000 });
      await page.waitForTimeout(1500); // a few samples: the sparklines have a line
      const gpus = await page.evaluate(
        () =>
          window.jupyterapp.shell.currentWidget.node.querySelectorAll(
            '.jp-OutputArea-output .gpu-magics-monitor tr.gpu-magics-gpu'
          ).length
      );
      step(`${notebook}: ${gpus} GPU rows`);
      for (const theme of ['light', 'dark']) {
        await setTheme(page, theme);
        for (let k = 0; k < 5; k++) {  // over a few redraws: the values change length as they tick
          const found = await layoutProblems(page);
          if (found.length) problems.push(`${notebook} (${theme}): ${[...new Set(found)].join('; ')}`);
          await page.waitForTimeout(300);
        }
        const monitor = page.locator(`${here} .jp-OutputArea-output .gpu-magics-monitor`).first();
        // the live panel is redrawn four times a second: Playwright would wait for it to be still
        await page.evaluate(() =>
          window.jupyterapp.shell.currentWidget.node
            .querySelector('.jp-OutputArea-output .gpu-magics-monitor')
            .scrollIntoView()
        );
        await steadyScreenshot(monitor, { path: path.join(artifacts, `monitor-${stem}-${theme}.png`) });
        if (stem === 'gpus-4') {
          docsPicture(path.join(artifacts, `monitor-${stem}-${theme}.png`), 'monitor', theme);
        }
        const summaries = page.locator(`${here} .jp-OutputArea-output .gpu-magics-cell-monitor`);
        for (let k = 0; k < (await summaries.count()); k++) {
          await summaries.nth(k).scrollIntoViewIfNeeded();
          const which = k === 0 ? 'host' : 'gpus';
          await summaries.nth(k).screenshot({ path: path.join(artifacts, `monitor-${stem}-summary-${which}-${theme}.png`) });
        }
        await page.screenshot({ path: path.join(artifacts, `monitor-${stem}-window-${theme}.png`) });
      }
      const charts = await page.evaluate(() =>
        Array.from(
          window.jupyterapp.shell.currentWidget.node.querySelectorAll('.jp-OutputArea-output .gpu-magics-cell-monitor svg')
        ).map(
          svg => svg.querySelectorAll('path').length
        )
      );
      step(`${notebook}: summary charts with ${JSON.stringify(charts)} paths`);
      if (charts.some(count => count < 2)) problems.push(`${notebook}: a summary chart is an empty box`);
      await setTheme(page, 'light');
      await page.evaluate(async () => {
        const panel = window.jupyterapp.shell.currentWidget;
        await panel.context.save();
        await panel.sessionContext.shutdown();
        panel.dispose();
      });
    }
  } finally {
    await browser.close();
  }
  if (problems.length) {
    console.log(`[monitor] FAILED: ${problems.join(' | ')}`);
    process.exit(1);
  }
  step('every panel reads on one line per GPU');
}

main().catch(error => {
  console.error(error);
  process.exit(1);
});
