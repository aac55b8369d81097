// The SPMD views the documentation shows, as a user sees them in a 1400 px window with the left sidebar open at its
// default width, light and dark: a cell whose ranks draw tqdm bars (each rank's finished bars stay with the live
// ones, in its place, never in the stderr block), and a cell in which rank 0 goes quiet while rank 1 is done (its
// status row says where it waits, on a line under the row: the table keeps four columns and fits the output).
// Screenshots go to $ARTIFACTS and to docs/_build/screenshots (spmd-progress-*, spmd-status-*).
// Usage: node spmd_pictures.mjs BASE_URL TOKEN NOTEBOOK_PATH
import fs from 'node:fs';
import path from 'node:path';
import { docsPicture, hideToasts, launch, openNotebook, steadyScreenshot } from './chromium.mjs';

const [base, token, notebook] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
fs.mkdirSync(artifacts, { recursive: true });
const step = message => console.log(`[spmd-pictures] ${message}`);
const SETUP = 0;
const PROGRESS = 1;
const QUIET = 2;
const STOP = 3;

async function openSidebar(page) {
  await page.evaluate(async () => {
    await window.jupyterapp.restored;
    window.jupyterapp.shell.activateById('filebrowser');
  });
  await page.waitForFunction(() => !window.jupyterapp.shell.leftCollapsed, null, { timeout: 30000 });
  const width = await page.evaluate(() => document.querySelector('#jp-left-stack').getBoundingClientRect().width);
  step(`left sidebar ${Math.round(width)} px wide`);
  if (width < 150 || width > 320) throw new Error(`the left sidebar is ${width} px: not open at its default width`);
}

async function setTheme(page, theme) {
  const name = theme === 'dark' ? 'JupyterLab Dark' : 'JupyterLab Light';
  await page.evaluate(n => window.jupyterapp.commands.execute('apputils:change-theme', { theme: n }), name);
  await page.waitForFunction(light => document.body.dataset.jpThemeLight === light, String(theme !== 'dark'), {
    timeout: 60000
  });
  await page.waitForSelector('#jupyterlab-splash', { state: 'detached', timeout: 60000 }).catch(() => null);
  await page.waitForTimeout(1000);
}

/** Run cell `index` (its output replaced); returns at once (the command's promise ends with the cell). */
async function startCell(page, index) {
  await page.evaluate(i => {
    const panel = window.jupyterapp.shell.currentWidget;
    panel.content.activeCellIndex = i;
    void window.jupyterapp.commands.execute('notebook:run-cell');
  }, index);
}

async function waitForCell(page, index, timeout = 240000) {
  await page.waitForFunction(
    i => {
      const prompt = document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')[i];
      return prompt && /\[\d+\]/.test(prompt.textContent || '');
    },
    index,
    { timeout }
  );
}

const output = (page, index) => page.locator('.jp-CodeCell').nth(index).locator('.jp-OutputArea');

/** What a cell's outputs say: the bars' view, the stderr block, the status table's columns, note rows, overflow. */
async function cellFacts(page, index) {
  return page.evaluate(i => {
    const cell = document.querySelectorAll('.jp-CodeCell')[i];
    const table = cell.querySelector('.gpu-magics-spmd table');
    const area = cell.querySelector('.jp-OutputArea');
    return {
      bars: Array.from(cell.querySelectorAll('.gpu-magics-spmd-progress')).map(n => n.textContent || ''),
      stderr: Array.from(cell.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'))
        .map(n => n.textContent || '')
        .join('\n'),
      columns: table ? table.querySelectorAll('thead th').length : 0,
      notes: Array.from(cell.querySelectorAll('.gpu-magics-spmd-note')).map(n => n.textContent || ''),
      overflow: table ? table.getBoundingClientRect().right - area.getBoundingClientRect().right : 0
    };
  }, index);
}

async function progressPicture(page, theme, problems) {
  const facts = await cellFacts(page, PROGRESS);
  step(`progress (${theme}): ${JSON.stringify(facts).slice(0, 500)}`);
  const bars = (facts.bars[facts.bars.length - 1] || '').split('\n');
  for (const rank of ['0', '1']) {
    const finished = bars.filter(line => line.startsWith(`[${rank}] epoch`) && line.includes('30/30'));
    if (finished.length !== 2) problems.push(`rank ${rank}'s two finished bars are not with the bars: ${bars}`);
  }
  if (facts.stderr.includes('30/30')) problems.push('a finished bar is in the stderr block');
  const area = output(page, PROGRESS);
  await area.scrollIntoViewIfNeeded();
  const file = path.join(artifacts, `spmd-progress-${theme}.png`);
  await steadyScreenshot(area, { path: file });
  docsPicture(file, 'spmd-progress', theme);
}

async function quietPicture(page, theme, problems) {
  await startCell(page, QUIET);
  try {
    await page.waitForFunction(
      i => (document.querySelectorAll('.jp-CodeCell')[i].querySelector('.gpu-magics-spmd-note')?.textContent || '').includes('no output for'),
      QUIET,
      { timeout: 60000 }
    );
  } catch (error) {
    await page.screenshot({ path: path.join(artifacts, `spmd-pictures-failure-${theme}.png`) });
    const shown = await page.evaluate(i => document.querySelectorAll('.jp-CodeCell')[i].querySelector('.jp-OutputArea')?.innerHTML, QUIET);
    throw new Error(`no note of the quiet rank; the cell shows: ${String(shown).slice(0, 3000)}`);
  }
  await page.waitForTimeout(600); // the row's time ticks on; the note is there
  const facts = await cellFacts(page, QUIET);
  step(`quiet rank (${theme}): ${JSON.stringify(facts)}`);
  if (facts.columns !== 4) problems.push(`the status table has ${facts.columns} columns, not 4 (${theme})`);
  if (!facts.notes.some(note => /no output for \d+ s · cell line 3, in wait_for_batch/.test(note))) {
    problems.push(`no note says where rank 0 waits: ${facts.notes}`);
  }
  if (facts.overflow > 1) problems.push(`the status table runs ${facts.overflow} px past the output area (${theme})`);
  const area = output(page, QUIET);
  await area.scrollIntoViewIfNeeded();
  const file = path.join(artifacts, `spmd-status-${theme}.png`);
  await steadyScreenshot(area, { path: file });
  docsPicture(file, 'spmd-status', theme);
  await waitForCell(page, QUIET);
}

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const problems = [];
  try {
    step('loading JupyterLab');
    await openNotebook(page, base, token, notebook);
    await hideToasts(page);
    await openSidebar(page);
    for (const index of [SETUP, PROGRESS]) {
      await startCell(page, index);
      await waitForCell(page, index);
    }
    for (const theme of ['light', 'dark']) {
      if (theme === 'dark') await setTheme(page, 'dark');
      await progressPicture(page, theme, problems);
      await quietPicture(page, theme, problems);
    }
    await setTheme(page, 'light');
    await startCell(page, STOP);
    await waitForCell(page, STOP);
  } finally {
    await browser.close();
  }
  if (problems.length) {
    console.log(`[spmd-pictures] problems:\n- ${problems.join('\n- ')}`);
    process.exit(1);
  }
  console.log('[spmd-pictures] every SPMD picture taken');
}

main().catch(error => {
  console.error(error);
  process.exit(1);
});
