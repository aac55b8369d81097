// The rich displays in real JupyterLab: run tests/notebooks/displays.ipynb and check each display rendered
// (arrays with their chunk-grid SVG, graph summaries with their DAG SVG, an escaped <script> name that never runs,
// the widget mode, %%gpurun's progress and summary, --compare, the cluster view, %gpumonitor), take light and
// dark screenshots, then save, shut the kernel down, reload and check the saved outputs still show (no widget
// model needed). Screenshots go to $ARTIFACTS. Usage: node displays.mjs BASE_URL TOKEN NOTEBOOK_PATH
import fs from 'node:fs';
import path from 'node:path';
import { launch, openNotebook, steadyScreenshot } from './chromium.mjs';

const [base, token, notebook] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
fs.mkdirSync(artifacts, { recursive: true });
const step = message => console.log(`[displays] ${message}`);

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const problems = [];
  page.on('dialog', async dialog => {
    problems.push(`a dialog opened: ${dialog.message()} (a name was not escaped)`);
    await dialog.dismiss();
  });
  try {
    step('loading JupyterLab');
    await openNotebook(page, base, token, notebook);
    step('running every cell');
    await page.evaluate(() => void window.jupyterapp.commands.execute('notebook:run-all-cells'));
    const progress = await page
      .waitForFunction(
        () => {
          const line = document.querySelector('.gpu-magics-progress');
          return line && /elapsed · \d+ \/ \d+ dask tasks/.test(line.textContent || '') ? line.textContent : null;
        },
        null,
        { timeout: 240000, polling: 100 }
      )
      .then(handle => handle.jsonValue())
      .catch(() => null);
    step(`progress while %%gpurun ran: ${progress}`);
    if (!progress) problems.push('no elapsed time and task count in the live panel while %%gpurun ran');
    else {
      // the live panel is replaced as figures arrive and gives way to the summary when the cell ends: a picture of
      // it is a record, not a check (the line above was the check)
      const live = page.locator('.gpu-magics-monitor', { has: page.locator('.gpu-magics-progress') }).first();
      await steadyScreenshot(live, { path: path.join(artifacts, 'displays-progress.png'), timeout: 5000 })
        .catch(error => step(`no picture of the live panel (${String(error).split('\n')[0]})`));
    }
    await page.waitForFunction(
      () => {
        const prompts = Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputPrompt'));
        return prompts.length > 0 && prompts.every(p => /\[\d+\]/.test(p.textContent || ''));
      },
      null,
      { timeout: 240000 }
    );
    const counts = await page.evaluate(() => ({
      arrays: document.querySelectorAll('.jp-OutputArea-output .gpu-magics-array').length,
      arraySvgs: document.querySelectorAll('.jp-OutputArea-output .gpu-magics-array svg').length,
      graphs: document.querySelectorAll('.jp-OutputArea-output .gpu-magics-graph').length,
      graphSvgs: document.querySelectorAll('.jp-OutputArea-output .gpu-magics-graph svg').length,
      errors: document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
        .length,
      tracebacks: Array.from(document.querySelectorAll('.jp-OutputArea-output')).filter(o =>
        /Traceback|Error:/.test(o.textContent || '')
      ).length,
      escaped: Array.from(document.querySelectorAll('.jp-OutputArea-output')).some(o =>
        (o.textContent || '').includes('<script>alert(1)</script>')
      ),
      widgets: document.querySelectorAll('.jp-OutputArea-output .widget-html, .jp-OutputArea-output .jupyter-widgets')
        .length
    }));
    step(`rendered: ${JSON.stringify(counts)}`);
    if (counts.arrays < 6 || counts.arraySvgs < 6) problems.push(`expected 6+ array displays with SVG grids`);
    if (counts.graphs < 3 || counts.graphSvgs < 3) problems.push(`expected 3 graph summaries with SVG DAGs`);
    if (counts.tracebacks > 0) problems.push(`${counts.tracebacks} outputs show an error`);
    if (!counts.escaped) problems.push('the <script> array name is not shown as text');
    if (counts.widgets < 1) problems.push('the widget-mode display did not render as a widget');
    problems.push(...(await checkMagicOutputs(page)));
    await screenshots(page, 'light');
    step('dark theme');
    await page.evaluate(() => window.jupyterapp.commands.execute('apputils:change-theme', { theme: 'JupyterLab Dark' }));
    await page.waitForFunction(() => document.body.dataset.jpThemeLight === 'false', null, { timeout: 60000 });
    await page.waitForTimeout(1000);
    await screenshots(page, 'dark');
    step('saving, shutting the kernel down and reloading');
    await page.evaluate(async () => {
      const panel = window.jupyterapp.shell.currentWidget;
      await panel.context.save();
      await panel.sessionContext.shutdown();
    });
    await page.reload();
    await page.waitForSelector('.jp-Notebook .gpu-magics-cluster', { timeout: 120000 });
    await page.waitForTimeout(2000);
    const reloaded = await page.evaluate(() => ({
      monitors: Array.from(document.querySelectorAll('.jp-OutputArea-output .gpu-magics-monitor')).map(
        m => m.textContent || ''
      ),
      missingModel: Array.from(document.querySelectorAll('.jp-CodeCell'))
        .filter(c => /^%%?gpu/.test(c.querySelector('.jp-InputArea-editor')?.textContent || ''))
        .some(c => /model not found/i.test(c.querySelector('.jp-OutputArea')?.textContent || '')),
      runs: document.querySelectorAll('.jp-OutputArea-output .gpu-magics-run').length
    }));
    step(`after reload: ${JSON.stringify({ ...reloaded, monitors: reloaded.monitors.map(m => m.slice(0, 60)) })}`);
    if (reloaded.missingModel) problems.push('a saved output says "model not found" after the kernel went away');
    if (!reloaded.monitors.some(m => m.includes('stopped') && m.includes('GPU 1'))) {
      problems.push('the %gpumonitor panel did not keep its last view after a reload');
    }
    if (reloaded.runs < 1) problems.push('the %%gpurun summary is gone after a reload');
    const monitor = page.locator('.jp-OutputArea-output .gpu-magics-monitor').first();
    await monitor.scrollIntoViewIfNeeded();
    await page.waitForTimeout(500);
    await steadyScreenshot(monitor, { path: path.join(artifacts, 'displays-monitor-reloaded-dark.png') });
  } finally {
    await browser.close();
  }
  if (problems.length) {
    console.log(`[displays] FAILED: ${problems.join('; ')}`);
    process.exit(1);
  }
  step('all displays rendered');
}

// What the magics left in the notebook: one output each, headline first, no empty outputs.
async function checkMagicOutputs(page) {
  const found = await page.evaluate(() => {
    const cells = Array.from(document.querySelectorAll('.jp-CodeCell'));
    const source = cell => cell.querySelector('.jp-InputArea-editor')?.textContent || '';
    const outputs = cell => Array.from(cell.querySelectorAll('.jp-OutputArea-output'));
    const gpurun = cells.filter(c => source(c).startsWith('%%gpurun'));
    return {
      gpurunOutputs: gpurun.map(c => outputs(c).map(o => (o.textContent || '').trim().slice(0, 80))),
      run: document.querySelector('.gpu-magics-run')?.textContent || '',
      compare: document.querySelector('.gpu-magics-compare')?.textContent || '',
      cluster: document.querySelector('.gpu-magics-cluster')?.textContent || '',
      stopped: Array.from(document.querySelectorAll('.gpu-magics-monitor')).some(m =>
        (m.textContent || '').includes('stopped')
      ),
      columns: Array.from(document.querySelectorAll('.gpu-magics-compare table, .gpu-magics-cluster table')).reduce(
        (sum, table) => sum + table.querySelectorAll('thead th, tr:first-child th').length,
        0
      ),
      // each table column: its header and its cells aligned alike, as rendered in this theme
      misaligned: Array.from(document.querySelectorAll('.gpu-magics-compare table, .gpu-magics-cluster table'))
        .flatMap(table => {
          const header = Array.from(table.querySelectorAll('thead th, tr:first-child th'));
          const rows = Array.from(table.querySelectorAll('tbody tr')).filter(row => row.querySelector('td'));
          return header.flatMap((th, column) => {
            const wanted = getComputedStyle(th).textAlign;
            return rows
              .map(row => row.children[column])
              .filter(cell => cell && cell.tagName === 'TD' && getComputedStyle(cell).textAlign !== wanted)
              .map(cell => `${th.textContent}: header ${wanted}, cell ${getComputedStyle(cell).textAlign}`);
          });
        })
    };
  });
  console.log(`[displays] magic outputs: ${JSON.stringify(found)}`);
  const problems = [];
  for (const texts of found.gpurunOutputs) {
    if (texts.some(t => t === '')) problems.push(`an empty output under a %%gpurun cell: ${JSON.stringify(texts)}`);
  }
  if (!/^cpu-threads · /.test(found.run.trim())) problems.push(`the %%gpurun summary does not start with its headline`);
  if (found.run.includes('\u23f1')) problems.push('the %%gpurun summary still has the stopwatch emoji');
  if (!/Skipped: gpu \(/.test(found.compare)) problems.push('the skipped backends are not listed under the table');
  if (!found.compare.includes('best of 2')) problems.push('the bars do not say "best of 2"');
  if (!found.cluster.includes('node-a') || !found.cluster.includes('unreadable')) {
    problems.push('the cluster view lacks its per-host GPU rows');
  }
  if (!found.stopped) problems.push('%gpumonitor --stop did not leave the last view');
  if (found.columns < 8) problems.push(`only ${found.columns} table columns found to check their alignment`);
  if (found.misaligned.length) problems.push(`table columns misaligned: ${found.misaligned.join('; ')}`);
  return problems;
}

async function screenshots(page, theme) {
  const shots = [
    ['.gpu-magics-run', 0, 'run'],
    ['.gpu-magics-run', 1, 'run-gpus'],
    ['.gpu-magics-compare', 0, 'compare'],
    ['.gpu-magics-cluster', 0, 'cluster'],
    ['.gpu-magics-monitor', 0, 'monitor'],
    ['.gpu-magics-array', 0, 'array'],
    ['.gpu-magics-graph', 0, 'graph'],
    ['.gpu-magics-graph', 1, 'graph-big']
  ];
  for (const [selector, nth, name] of shots) {
    const target = page.locator(`.jp-OutputArea-output ${selector}`).nth(nth);
    await target.scrollIntoViewIfNeeded();
    await steadyScreenshot(target, { path: path.join(artifacts, `displays-${name}-${theme}.png`) });
  }
}

main().catch(error => {
  console.error(error);
  process.exit(1);
});
