// What a user sees in the side panel at JupyterLab's default sidebar width, in the light and dark themes:
// GPU cards that keep their height while values tick, values on one line, a labelled chart, a cluster with
// workers on two hosts, the Scale dialog's messages, the Restart confirmation; or, without a GPU, a neutral note.
// Usage: node panel_layout.mjs BASE_URL TOKEN MODE (gpus | no-gpu). Screenshots go to $ARTIFACTS.
// In `gpus` mode $CLUSTER_NAME names a cluster record the test wrote, with members on two hosts.
import fs from 'node:fs';
import path from 'node:path';
import { docsPicture, hideToasts, launch, steadyScreenshot } from './chromium.mjs';

const [base, token, mode] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
const CLUSTER = process.env.CLUSTER_NAME || 'multi';
// the row's title for that record (another kind of cluster, such as a gateway's, names itself otherwise)
const CLUSTER_TITLE = process.env.CLUSTER_TITLE || 'GPU cluster \u00b7 3\u00d7 NVIDIA H200';
fs.mkdirSync(artifacts, { recursive: true });

const step = message => console.log(`[layout] ${message}`);

function check(condition, message) {
  if (!condition) {
    throw new Error(message);
  }
}

async function openPanel(page) {
  await page.goto(`${base}lab?token=${token}`);
  await page.waitForSelector('#main', { timeout: 120000 });
  await page.waitForFunction(() => window.jupyterapp?.commands.hasCommand('gpu-magics:open'), null, {
    timeout: 120000
  });
  await page.evaluate(async () => {
    await window.jupyterapp.restored;
    await window.jupyterapp.commands.execute('gpu-magics:open');
  });
  await page.waitForSelector('#gpu-magics-panel .jp-GpuMagics-status[data-phase="open"]', { timeout: 60000 });
  await hideToasts(page);
  const width = await page.evaluate(() => document.querySelector('#gpu-magics-panel').getBoundingClientRect().width);
  step(`panel width ${Math.round(width)} px`);
  check(width <= 300, `the panel is ${width} px wide: not the default sidebar width`);
}

async function setTheme(page, theme) {
  const name = theme === 'dark' ? 'JupyterLab Dark' : 'JupyterLab Light';
  await page.evaluate(n => window.jupyterapp.commands.execute('apputils:change-theme', { theme: n }), name);
  await page.waitForFunction(light => document.body.dataset.jpThemeLight === light, String(theme !== 'dark'), {
    timeout: 30000
  });
  await page.waitForSelector('#jupyterlab-splash', { state: 'detached', timeout: 30000 });
  await page.waitForTimeout(800); // let a few samples arrive in the new theme
}

const panelShot = (page, name) =>
  steadyScreenshot(page.locator('#gpu-magics-panel'), { path: path.join(artifacts, `${name}.png`) });

/** Every card's height and every value's line count, sampled while the values tick (~5 s). */
async function watchCards(page) {
  const samples = [];
  for (let i = 0; i < 25; i++) {
    samples.push(
      await page.evaluate(() =>
        Array.from(document.querySelectorAll('.jp-GpuMagics-card')).map(card => ({
          gpu: card.dataset.gpu,
          height: card.getBoundingClientRect().height,
          // the card's content edge: no value may run into its padding
          contentRight: card.getBoundingClientRect().right - parseFloat(getComputedStyle(card).paddingRight),
          values: Array.from(
            card.querySelectorAll('.jp-GpuMagics-value, .jp-GpuMagics-legend, .jp-GpuMagics-label')
          ).map(node => ({
            text: node.textContent,
            lines: node.getClientRects().length,
            height: node.getBoundingClientRect().height,
            lineHeight: parseFloat(getComputedStyle(node).lineHeight) || 0,
            overflows: node.scrollWidth > node.clientWidth + 1 && getComputedStyle(node).display !== 'inline',
            right: node.getBoundingClientRect().right
          }))
        }))
      )
    );
    await page.waitForTimeout(200);
  }
  return samples;
}

function checkCards(samples) {
  const heights = new Map();
  const texts = new Set();
  for (const sample of samples) {
    check(sample.length === 2, `expected 2 GPU cards, saw ${sample.length}`);
    for (const card of sample) {
      heights.set(card.gpu, [...(heights.get(card.gpu) ?? []), card.height]);
      for (const value of card.values) {
        texts.add(value.text);
        check(value.lines === 1, `"${value.text}" wraps onto ${value.lines} lines`);
        check(
          value.lineHeight === 0 || value.height <= value.lineHeight * 1.5,
          `"${value.text}" is ${value.height} px tall, more than one line (${value.lineHeight} px)`
        );
        check(!value.overflows, `"${value.text}" is cut off`);
        check(
          value.right <= card.contentRight + 0.5,
          `"${value.text}" runs past its card's content edge (${value.right} > ${card.contentRight} px)`
        );
      }
    }
  }
  for (const [gpu, list] of heights) {
    const spread = Math.max(...list) - Math.min(...list);
    check(spread < 0.5, `GPU ${gpu}'s card changed height by ${spread} px while its values ticked: ${list}`);
    step(`GPU ${gpu} card height ${list[0]} px over ${list.length} samples`);
  }
  check(texts.size > 12, 'the values did not tick during the watch');
}

async function checkChartLabels(page) {
  const legend = await page.locator('.jp-GpuMagics-card[data-gpu="0"] .jp-GpuMagics-legend').textContent();
  check(/util/.test(legend) && /memory/.test(legend), `the chart has no legend: "${legend}"`);
  check(/last \d+ (s|min)/.test(legend), `the chart does not say its time span: "${legend}"`);
  const axis = await page.locator('.jp-GpuMagics-card[data-gpu="0"] .jp-GpuMagics-axis').allTextContents();
  check(axis.includes('100%') && axis.includes('0%'), `the chart has no 0-100% scale: ${axis}`);
  const bar = await page.locator('.jp-GpuMagics-card[data-gpu="0"] .jp-GpuMagics-memoryBar').textContent();
  check(/^Memory[\d.]+\/\d+ GiB$/.test(bar), `the memory bar is not labelled: "${bar}"`);
  step(`chart legend "${legend}", memory bar "${bar}"`);
}

async function serverClusters(page) {
  return page.evaluate(async t => {
    const reply = await fetch(`${window.location.origin}/gpu-magics/api/clusters`, {
      headers: { Authorization: `token ${t}` }
    });
    return (await reply.json()).clusters;
  }, token);
}

async function checkCluster(page, theme) {
  const row = page.locator(`.jp-GpuMagics-cluster[data-cluster="${CLUSTER}"]`);
  await row.waitFor({ timeout: 30000 });
  await page.waitForFunction(
    name => {
      const buttons = document.querySelectorAll(`.jp-GpuMagics-cluster[data-cluster="${name}"] button`);
      return Array.from(buttons).some(b => b.textContent === 'Scale' && !b.disabled);
    },
    CLUSTER,
    { timeout: 30000 }
  );
  const title = await row.locator('.jp-GpuMagics-clusterTitle').textContent();
  const cluster = (await serverClusters(page)).find(c => c.name === CLUSTER);
  if (Array.isArray(cluster?.members) && cluster.members.length) {
    check(title.includes(CLUSTER_TITLE), `the cluster row is not named clearly: "${title}"`);
    const hosts = await row.locator('.jp-GpuMagics-host').allTextContents();
    check(
      JSON.stringify(hosts) === JSON.stringify(['127.0.0.1', '127.0.0.2']),
      `expected hosts 127.0.0.1 and 127.0.0.2, saw ${hosts}`
    );
    const lines = await row.locator('.jp-GpuMagics-memberGpu').allTextContents();
    check(lines.length === 5, `expected 5 member lines (kernel, 3 GPUs, 1 waiting), saw ${lines.length}: ${lines}`);
    check(lines.some(l => /GPU 1 \u00b7 w-1.*\d+%.*GiB/.test(l)), `no live line for w-1's GPU: ${lines}`);
    check(lines.some(l => /waiting for its first report/.test(l)), `no waiting worker: ${lines}`);
    const unreadable = row.locator('.jp-GpuMagics-unreadable');
    check((await unreadable.getAttribute('title')) === 'GPU is lost', 'the unreadable GPU does not say why');
    const heights = await row
      .locator('.jp-GpuMagics-memberGpu')
      .evaluateAll(nodes => nodes.map(n => n.getBoundingClientRect().height));
    check(Math.max(...heights) < 24, `a member line wraps: heights ${heights}`);
    step(`members: rendered on two hosts: ${lines.join(' | ')}`);
  } else {
    check(/GPU cluster \u00b7 4 workers/.test(title), `the cluster row is not named clearly: "${title}"`);
    step('members: not sent by the server yet (its records do not carry them): member checks skipped');
  }
  const dashboard = row.locator('a.jp-GpuMagics-dashboard');
  const href = await dashboard.getAttribute('href');
  check(href === (cluster?.dashboard_link ?? cluster?.dashboard_url), `the dashboard link is ${href}`);
  if (cluster?.dashboard_note) {
    const note = await row.locator('.jp-GpuMagics-dashboardNote').textContent();
    check(note === cluster.dashboard_note, `the dashboard note is "${note}"`);
  }
  const notes = await row.locator('.jp-GpuMagics-memberNote').evaluateAll(nodes =>
    nodes.map(node => ({ text: node.textContent, cut: node.scrollWidth > node.clientWidth + 1 }))
  );
  for (const note of notes) {
    check(!note.cut, `the note "${note.text}" is cut off`);
  }
  check(notes.some(note => /in use that no process of yours reports/.test(note.text)), 'no note of others\u2019 use');
  step(`cluster row: ${title}`);
  await steadyScreenshot(row, { path: path.join(artifacts, `layout-cluster-${theme}.png`) });
  docsPicture(path.join(artifacts, `layout-cluster-${theme}.png`), 'cluster-card', theme);
}

async function typeWorkers(page, text) {
  const input = page.locator('.jp-Dialog .jp-GpuMagics-scaleDialog input');
  await input.fill('');
  if (text) {
    await input.pressSequentially(text);
  } else {
    await input.pressSequentially('1');
    await input.press('Backspace');
  }
  const message = await page.locator('.jp-GpuMagics-scaleMessage').textContent();
  const disabled = await page.locator('.jp-Dialog button.jp-mod-accept').isDisabled();
  return { message, disabled };
}

async function checkScaleDialog(page, theme) {
  const row = page.locator(`.jp-GpuMagics-cluster[data-cluster="${CLUSTER}"]`);
  await row.locator('button', { hasText: 'Scale' }).click();
  await page.locator('.jp-Dialog .jp-GpuMagics-scaleDialog input').waitFor();
  const expected = {
    '0': 'A cluster needs at least 1 worker; to end it, use Stop.',
    '2.5': 'Workers come whole: enter 2 or 3, not 2.5.',
    '': 'Enter a number of workers, such as 2.'
  };
  for (const [text, message] of Object.entries(expected)) {
    const seen = await typeWorkers(page, text);
    check(seen.message === message, `Scale with "${text}" says "${seen.message}", not "${message}"`);
    check(seen.disabled, `Scale with "${text}" leaves the Scale button enabled`);
    step(`Scale "${text}": ${seen.message}`);
  }
  await typeWorkers(page, '2.5');
  await steadyScreenshot(page.locator('.jp-Dialog-content'), { path: path.join(artifacts, `layout-scale-error-${theme}.png`) });
  const fine = await typeWorkers(page, '3');
  check(fine.message === '' && !fine.disabled, `Scale with "3" is refused: "${fine.message}"`);
  await page.locator('.jp-Dialog button.jp-mod-reject').click();
  await page.locator('.jp-Dialog').waitFor({ state: 'detached' });
}

async function checkRestartConfirmation(page) {
  const row = page.locator(`.jp-GpuMagics-cluster[data-cluster="${CLUSTER}"]`);
  await row.locator('button', { hasText: 'Restart' }).click();
  const dialog = page.locator('.jp-Dialog');
  await dialog.waitFor();
  const text = await dialog.textContent();
  check(text.includes(`Restart ${CLUSTER}?`) && /lost/.test(text), `the Restart confirmation says "${text}"`);
  check((await dialog.locator('button.jp-mod-warn').textContent()).includes('Restart'), 'no Restart button');
  await dialog.locator('button.jp-mod-reject').click();
  await dialog.waitFor({ state: 'detached' });
  check((await row.locator('.jp-GpuMagics-busy').count()) === 0, 'a cancelled Restart still restarted');
  step('Restart asks first, and Cancel leaves the cluster alone');
}

async function checkIcon(page) {
  const markup = await page.evaluate(
    () => document.querySelector('.lm-TabBar-tab[data-id="gpu-magics-panel"] svg')?.outerHTML ?? ''
  );
  check(markup.includes('evenodd'), 'the sidebar tab does not show the GPU board icon');
  await page
    .locator('.jp-SideBar.jp-mod-left')
    .screenshot({ path: path.join(artifacts, 'layout-sidebar-icons.png') });
}

/** Drag the sidebar's edge as a user would, to make the panel `extra` px wider. */
async function widenSidebar(page, extra) {
  const handle = page.locator('#jp-main-split-panel > .lm-SplitPanel-handle').first();
  const box = await handle.boundingBox();
  const x = box.x + box.width / 2;
  const y = box.y + box.height / 2;
  await page.mouse.move(x, y);
  await page.mouse.down();
  await page.mouse.move(x + extra, y, { steps: 5 });
  await page.mouse.up();
  await page.waitForTimeout(300);
  return page.evaluate(() => document.querySelector('#gpu-magics-panel').getBoundingClientRect().width);
}

async function gpusMode(page) {
  await openPanel(page);
  await page.locator('.jp-GpuMagics-card').nth(1).waitFor({ timeout: 60000 });
  await checkIcon(page);
  for (const theme of ['light', 'dark']) {
    if (theme === 'dark') {
      await setTheme(page, 'dark');
    }
    checkCards(await watchCards(page));
    await checkChartLabels(page);
    await steadyScreenshot(page.locator('.jp-GpuMagics-cards'), { path: path.join(artifacts, `layout-cards-${theme}.png`) });
    await checkCluster(page, theme);
    await checkScaleDialog(page, theme);
    await panelShot(page, `layout-panel-${theme}`);
    docsPicture(path.join(artifacts, `layout-panel-${theme}.png`), 'panel', theme);
  }
  await checkRestartConfirmation(page);
  const width = await widenSidebar(page, 150);
  step(`sidebar widened to ${Math.round(width)} px`);
  check(width > 350, `the sidebar did not widen (${width} px)`);
  checkCards(await watchCards(page));
  await panelShot(page, 'layout-panel-wide-dark');
}

async function noGpuMode(page) {
  await openPanel(page);
  for (const theme of ['light', 'dark']) {
    if (theme === 'dark') {
      await setTheme(page, 'dark');
    }
    const note = page.locator('.jp-GpuMagics-noGpu');
    await note.waitFor({ timeout: 60000 });
    const text = await note.textContent();
    check(text.includes('%%gpurun cpu-threads') && text.includes('%gpucluster --cpu-workers'), `the note says "${text}"`);
    const status = await page.locator('.jp-GpuMagics-status').textContent();
    check(!status.startsWith('Live'), `the status says "${status}" with nothing sampled`);
    check(await page.locator('.jp-GpuMagics-banner').isHidden(), 'an alarm banner is shown for a machine without GPU');
    check((await page.locator('.jp-GpuMagics-card').count()) === 0, 'cards are shown without a GPU');
    step(`no GPU (${theme}): status "${status}", note "${text}"`);
    await panelShot(page, `layout-no-gpu-${theme}`);
  }
}

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 }, deviceScaleFactor: 2 });
  const errors = [];
  page.on('pageerror', error => errors.push(String(error)));
  page.on('console', message => {
    if (message.type() === 'error' && /gpu-magics/i.test(message.text())) {
      errors.push(message.text());
    }
  });
  try {
    await (mode === 'no-gpu' ? noGpuMode(page) : gpusMode(page));
    check(errors.length === 0, `errors in the page:\n${errors.join('\n')}`);
    step('passed');
  } catch (error) {
    await page.screenshot({ path: path.join(artifacts, `layout-${mode}-failure.png`) }).catch(() => undefined);
    throw error;
  } finally {
    await browser.close();
  }
}

main().catch(error => {
  console.error(`[layout] FAILED: ${error.stack || error}`);
  process.exit(1);
});
