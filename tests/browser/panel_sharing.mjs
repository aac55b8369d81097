// The side panel on a shared GPU server, as a user sees it at the default sidebar width, light and dark: the GPU
// another user's job keeps busy is marked, and the memory list says whose that job's process is; the notebook's
// kernel and its cluster's worker say what they hold (arrays, cached, context), the kernel by which names too; the
// cluster says when its idle timeout closes it; Free cached runs in the kernel and the cache goes. The server caps each
// notebook at $CAP a GPU: the notebook's block says, per GPU, what it holds of the cap (over it, then under it once
// the cache is freed), and the kernel's near its own lower cap once the notebook sets one (%gpumemory --cap).
// Usage: node panel_sharing.mjs BASE_URL TOKEN NOTEBOOK (a notebook that starts cluster $CLUSTER_NAME).
// Screenshots go to $ARTIFACTS as sharing-*.png.
import fs from 'node:fs';
import path from 'node:path';
import { launch, steadyScreenshot } from './chromium.mjs';

const [base, token, notebook] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';
const CLUSTER = process.env.CLUSTER_NAME || 'shared';
const CAP = process.env.CAP || '8 GiB';
const NOTEBOOK_CAP = process.env.NOTEBOOK_CAP || '1.6GiB';
const BINDS =
  'The cap binds what CuPy, PyTorch, JAX and RMM allocate; memory taken outside them is counted here but not stopped.';
const SERVER_CAP_TITLE = `The server caps each notebook at ${CAP} a GPU (c.GpuMagicsServer.memory_cap). ${BINDS}`;
fs.mkdirSync(artifacts, { recursive: true });

const step = message => console.log(`[sharing] ${message}`);

function check(condition, message) {
  if (!condition) {
    throw new Error(message);
  }
}

const row = page => page.locator(`.jp-GpuMagics-cluster[data-cluster="${CLUSTER}"]`);
const owner = page => page.locator(`.jp-GpuMagics-owner[data-owner="${notebook}"]`);

async function openPanelAndRunNotebook(page) {
  await page.goto(`${base}lab/tree/${notebook}?token=${token}`);
  await page.waitForSelector('#main', { timeout: 120000 });
  await page.waitForFunction(() => window.jupyterapp?.commands.hasCommand('gpu-magics:open'), null, {
    timeout: 120000
  });
  await page.evaluate(async () => {
    await window.jupyterapp.restored;
    await window.jupyterapp.commands.execute('gpu-magics:open');
  });
  await page.waitForSelector('#gpu-magics-panel .jp-GpuMagics-status[data-phase="open"]', { timeout: 60000 });
  const width = await page.evaluate(() => document.querySelector('#gpu-magics-panel').getBoundingClientRect().width);
  step(`panel width ${Math.round(width)} px`);
  check(width <= 300, `the panel is ${width} px wide: not the default sidebar width`);
  await page.waitForFunction(
    () => window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle',
    null,
    { timeout: 120000 }
  );
  await page.evaluate(() => {
    void window.jupyterapp.commands.execute('notebook:run-all-cells'); // resolves only when the cells end
  });
}

/** Every element's text, its height and whether it (or a part of it) is cut, for `selector` inside `root`. */
async function linesOf(root, selector) {
  return root.locator(selector).evaluateAll(nodes =>
    nodes.map(node => ({
      text: node.textContent,
      title: node.getAttribute('title') || '',
      height: node.getBoundingClientRect().height,
      cut: [node, ...node.querySelectorAll('.jp-GpuMagics-part, .jp-GpuMagics-num, .jp-GpuMagics-partName')].some(
        part => part.scrollWidth > part.clientWidth + 1
      )
    }))
  );
}

function checkOneLine(lines, what, most = 20) {
  for (const line of lines) {
    check(line.height <= most, `${what} "${line.text}" wraps (${line.height} px tall)`);
    check(!line.cut, `${what} "${line.text}" is cut off at the default width`);
  }
}

/** The figures a split grid shows: its tooltip's first part ("1.0 GiB arrays · 10.0 GiB cached · 512 MiB ..."). */
const figures = split => split.title.split(':')[0];

async function checkCards(page) {
  const badge = page.locator('.jp-GpuMagics-card[data-gpu="0"] .jp-GpuMagics-others');
  await badge.waitFor({ timeout: 60000 });
  // until NVML's list of processes is read (every 2 s), the marker can only say what memory no one explains
  await page.waitForFunction(
    () => document.querySelector('.jp-GpuMagics-card[data-gpu="0"] .jp-GpuMagics-others')?.title.includes('pid 4242'),
    null,
    { timeout: 30000 }
  );
  const text = await badge.textContent();
  check(text === 'others', `GPU 0's marker says "${text}"`);
  const bar = page.locator('.jp-GpuMagics-card[data-gpu="0"] .jp-GpuMagics-memoryBar');
  check((await bar.getAttribute('title')).includes('39.5 GiB of it others'), 'the memory bar does not say what is others\'');
  check((await bar.locator('.jp-GpuMagics-barOthers').count()) === 1, 'the memory bar has no segment for others');
  const title = await badge.getAttribute('title');
  check(title.includes('pid 4242 holds 39.5 GiB'), `the marker's tooltip says "${title}"`);
  check((await page.locator('.jp-GpuMagics-card[data-gpu="1"] .jp-GpuMagics-others').count()) === 0, 'GPU 1 is marked');
  const fits = await page.evaluate(() => {
    const card = document.querySelector('.jp-GpuMagics-card[data-gpu="0"]').getBoundingClientRect();
    const mark = document.querySelector('.jp-GpuMagics-card[data-gpu="0"] .jp-GpuMagics-others').getBoundingClientRect();
    const title = document.querySelector('.jp-GpuMagics-card[data-gpu="0"] .jp-GpuMagics-cardTitle');
    return { inside: mark.right <= card.right && mark.left >= card.left, title: title.getBoundingClientRect().height };
  });
  check(fits.inside, 'the marker sticks out of its card');
  check(fits.title < 24, `the card's title wraps with the marker (${fits.title} px)`);
  const heights = await page
    .locator('.jp-GpuMagics-card')
    .evaluateAll(cards => cards.map(card => card.getBoundingClientRect().height));
  check(Math.abs(heights[0] - heights[1]) < 0.5, `the marked card is not as tall as the other: ${heights}`);
  step(`GPU 0 marked "${text}" (${title})`);
  // who used each GPU lately, by notebook (NVML's per-process samples): the other user's job, and the notebook idle
  await page.waitForFunction(
    () => document.querySelector('.jp-GpuMagics-card[data-gpu="0"] .jp-GpuMagics-gpuTime')?.textContent.includes('96%'),
    null,
    { timeout: 30000 }
  );
  const times = await page
    .locator('.jp-GpuMagics-card .jp-GpuMagics-gpuTime')
    .evaluateAll(nodes => nodes.map(n => ({ text: n.textContent, cut: n.scrollWidth > n.clientWidth + 1 })));
  check(
    JSON.stringify(times.map(t => t.text)) === JSON.stringify(['Time: others 96%', 'Time: no process ran lately']),
    `the cards' time lines say ${JSON.stringify(times)}`
  );
  check(times.every(t => !t.cut), `a card's time line is cut: ${JSON.stringify(times)}`);
  step(`time by notebook: ${times.map(t => t.text).join(' | ')}`);
}

async function checkCluster(page) {
  const cluster = row(page);
  await cluster.waitFor({ timeout: 180000 });
  await page.waitForFunction(
    name =>
      document.querySelector(`.jp-GpuMagics-cluster[data-cluster="${name}"] .jp-GpuMagics-idle[data-idle="idle"]`),
    CLUSTER,
    { timeout: 60000 }
  );
  await page.waitForFunction(
    name => {
      const cluster = document.querySelector(`.jp-GpuMagics-cluster[data-cluster="${name}"]`);
      const notes = Array.from(cluster?.querySelectorAll('.jp-GpuMagics-memberNote') ?? []).map(n => n.textContent);
      const splits = Array.from(cluster?.querySelectorAll('.jp-GpuMagics-split') ?? []).map(n => n.title);
      return splits.some(t => t.includes('6.0 GiB cached')) && notes.some(t => t.includes('pid 4242'));
    },
    CLUSTER,
    { timeout: 60000 }
  );
  await page.waitForFunction(
    name =>
      document.querySelector(`.jp-GpuMagics-cluster[data-cluster="${name}"] .jp-GpuMagics-plainCells`)?.dataset
        .plainCells === 'multi-gpu',
    CLUSTER,
    { timeout: 60000 }
  );
  const plain = await cluster.locator('.jp-GpuMagics-plainCells').textContent();
  check(plain === 'plain cells: multi-gpu (%gpurun)', `the plain-cells line says "${plain}"`);
  const idle = await cluster.locator('.jp-GpuMagics-idle').textContent();
  check(/^idle \d+ s \u00b7 closes in (29|30) min$/.test(idle), `the idle line says "${idle}"`);
  const notes = await linesOf(cluster, '.jp-GpuMagics-memberNote');
  checkOneLine(notes, 'the member note');
  const splits = await linesOf(cluster, '.jp-GpuMagics-split');
  checkOneLine(splits, 'the member figures', 30);
  const texts = [...notes.map(n => n.text), ...splits.map(figures)];
  for (const expected of [
    'others pid 4242 holds 39.5 GiB',
    '2.0 GiB arrays \u00b7 6.0 GiB cached \u00b7 512 MiB context',
    '1.0 GiB arrays \u00b7 10.0 GiB cached \u00b7 512 MiB context'
  ]) {
    check(texts.includes(expected), `no member note "${expected}": ${texts.join(' | ')}`);
  }
  const free = cluster.locator('.jp-GpuMagics-freeButtons button');
  check((await free.textContent()) === 'Free cached' && !(await free.isDisabled()), 'no Free cached for the cluster');
  const buttons = await cluster
    .locator('.jp-GpuMagics-buttons:not(.jp-GpuMagics-freeButtons) button')
    .evaluateAll(nodes => nodes.map(b => ({ text: b.textContent, disabled: b.disabled, top: b.getBoundingClientRect().top })));
  check(
    JSON.stringify(buttons.map(b => b.text)) === JSON.stringify(['Stop', 'Restart', 'Scale', 'Adapt']),
    `the cluster's buttons are ${buttons.map(b => b.text)}`
  );
  check(buttons.every(b => !b.disabled), 'a cluster button is disabled');
  check(new Set(buttons.map(b => Math.round(b.top))).size === 1, `the cluster buttons wrap onto two rows: ${JSON.stringify(buttons)}`);
  step(`cluster: "${plain}", "${idle}"; notes ${texts.join(' | ')}`);
}

async function checkMemory(page) {
  const block = owner(page);
  await block.waitFor({ timeout: 60000 });
  await page.waitForFunction(
    name => {
      const button = document.querySelector(`.jp-GpuMagics-owner[data-owner="${name}"] button`);
      return button && !button.disabled;
    },
    notebook,
    { timeout: 60000 }
  );
  const splits = await linesOf(block, '.jp-GpuMagics-split');
  checkOneLine(splits, 'the memory figures', 30);
  const texts = splits.map(figures);
  check(
    texts.includes('1.0 GiB arrays \u00b7 10.0 GiB cached \u00b7 512 MiB context'),
    `the kernel's split is missing: ${texts.join(' | ')}`
  );
  const holders = await linesOf(block, '.jp-GpuMagics-holder');
  checkOneLine(holders, 'the holder line');
  const button = block.locator('button');
  check((await button.textContent()) === 'Free cached', 'no Free cached for the notebook');
  step(`memory by notebook: ${holders.map(h => h.text).join(' | ')}; ${texts.join(' | ')}`);
  // the names that hold the kernel's memory (its own record says them), folded under its line; opened here
  const names = block.locator('details.jp-GpuMagics-names').first();
  await names.waitFor({ timeout: 60000 });
  const summary = await names.locator('summary').textContent();
  check(summary === 'held by embeddings', `the names' fold says "${summary}"`);
  if (!(await names.evaluate(fold => fold.open))) {
    await names.locator('summary').click();
  }
  const rows = await linesOf(names, '.jp-GpuMagics-name');
  checkOneLine(rows, 'the name line');
  check(rows.length === 1 && rows[0].text === 'embeddings512 MiB', `the names are ${rows.map(r => r.text)}`);
  check(
    rows[0].title === 'embeddings: DeviceArray 134217728 <f4; del embeddings gives it back',
    `the name's tooltip says "${rows[0].title}"`
  );
  step(`the kernel's names: ${summary}: ${rows.map(r => r.text).join(' | ')}`);
  // the other user's job: its pid once, and on its GPU's line whose it is (not its pid again), on one line
  const others = page.locator('.jp-GpuMagics-owner[data-owner="pid 4242"]');
  await others.waitFor({ timeout: 60000 });
  const theirs = await linesOf(others, '.jp-GpuMagics-holder');
  checkOneLine(theirs, 'the other user\u2019s line');
  const line = theirs.map(h => h.text).join(' | ');
  check(line.startsWith('GPU 0 \u00b7 another user\u2019s process'), `the other user's process says "${line}"`);
  step(`the other user's job: ${line}`);
  // the server's cap: the worker's 8.5 GiB on GPU 0 and the kernel's 11.5 GiB on GPU 1 are over it
  await checkCaps(
    page,
    [`GPU 0 \u00b7 8.5 GiB: over its ${CAP} cap`, `GPU 1 \u00b7 11.5 GiB: over its ${CAP} cap`],
    ['over', 'over'],
    [SERVER_CAP_TITLE, SERVER_CAP_TITLE]
  );
}

/** The notebook's cap lines: their text, state, tooltip, and whether any is cut, wraps or leaves its block. */
async function capLines(page) {
  return owner(page)
    .locator('.jp-GpuMagics-cap')
    .evaluateAll(nodes => {
      const colour = name => {
        const probe = document.createElement('div');
        probe.style.background = `var(${name})`;
        document.body.append(probe);
        const found = getComputedStyle(probe).backgroundColor;
        probe.remove();
        return found;
      };
      const theme = { under: '--jp-brand-color1', near: '--jp-warn-color1', over: '--jp-error-color1' };
      return nodes.map(node => {
        const box = node.getBoundingClientRect();
        const block = node.closest('.jp-GpuMagics-owner').getBoundingClientRect();
        const meter = node.querySelector('.jp-GpuMagics-capMeter').getBoundingClientRect();
        const text = node.querySelector('.jp-GpuMagics-capText');
        return {
          text: node.textContent,
          gpu: node.dataset.cap,
          level: node.dataset.level,
          over: node.dataset.over,
          by: node.dataset.by,
          title: node.title,
          fill: node.querySelector('.jp-GpuMagics-barFill').style.width,
          themed: getComputedStyle(node.querySelector('.jp-GpuMagics-barFill')).backgroundColor ===
            colour(theme[node.dataset.level]),
          height: text.getBoundingClientRect().height,
          cut: [text, ...text.children].some(part => part.scrollWidth > part.clientWidth + 1),
          inside: box.right <= block.right + 0.5 && meter.right <= block.right + 0.5 && meter.height > 0
        };
      });
    });
}

/**
 * Waits until the notebook's cap lines say `expected` (their texts, in the GPUs' order; with `only`, the lines of
 * those GPUs), then checks each: its state (`levels`), its tooltip (`titles`), one line, not cut, inside the block;
 * no other owner has one.
 */
async function checkCaps(page, expected, levels, titles, only = null) {
  await page
    .waitForFunction(
      ([name, want, gpus]) => {
        const lines = Array.from(
          document.querySelectorAll(`.jp-GpuMagics-owner[data-owner="${name}"] .jp-GpuMagics-cap`)
        ).filter(line => gpus === null || gpus.includes(line.dataset.cap));
        return JSON.stringify(lines.map(line => line.textContent)) === want;
      },
      [notebook, JSON.stringify(expected), only],
      { timeout: 60000 }
    )
    .catch(async () => {
      throw new Error(`the cap lines say ${JSON.stringify((await capLines(page)).map(l => l.text))}, not ${expected}`);
    });
  const lines = (await capLines(page)).filter(line => only === null || only.includes(line.gpu));
  lines.forEach((line, index) => {
    check(line.level === levels[index], `"${line.text}" is ${line.level}, not ${levels[index]}`);
    check(line.over === String(levels[index] === 'over'), `"${line.text}" has data-over=${line.over}`);
    check(line.title === titles[index], `"${line.text}"'s tooltip says "${line.title}"`);
    check(line.height <= 16, `"${line.text}" wraps (${line.height} px tall)`);
    check(!line.cut, `"${line.text}" is cut off at the default width`);
    check(line.inside, `"${line.text}" or its meter sticks out of the notebook's block`);
    check(line.themed, `"${line.text}"'s meter is not in the theme's colour for ${line.level}`);
  });
  const elsewhere = await page.locator('.jp-GpuMagics-owner:not([data-owner="' + notebook + '"]) .jp-GpuMagics-cap').count();
  check(elsewhere === 0, `${elsewhere} cap lines in blocks of other owners`);
  step(`caps: ${lines.map(line => `${line.text} [${line.level}, ${line.by}, ${line.fill}]`).join(' | ')}`);
  return lines;
}

/** Runs `source` in a new cell at the end of the notebook; resolves when it ran (its output's text). */
async function runNewCell(page, source) {
  return page.evaluate(async text => {
    const panel = window.jupyterapp.shell.currentWidget;
    const model = panel.content.model.sharedModel;
    model.insertCells(model.cells.length, [{ cell_type: 'code', source: text }]);
    panel.content.activeCellIndex = model.cells.length - 1;
    await window.jupyterapp.commands.execute('notebook:run-cell');
    const cell = panel.content.widgets[panel.content.widgets.length - 1];
    return cell.node.querySelector('.jp-OutputArea')?.textContent ?? '';
  }, source);
}

async function setTheme(page, theme) {
  const name = theme === 'dark' ? 'JupyterLab Dark' : 'JupyterLab Light';
  await page.evaluate(n => window.jupyterapp.commands.execute('apputils:change-theme', { theme: n }), name);
  await page.waitForFunction(light => document.body.dataset.jpThemeLight === light, String(theme !== 'dark'), {
    timeout: 30000
  });
  await page.waitForSelector('#jupyterlab-splash', { state: 'detached', timeout: 30000 });
  await page.waitForTimeout(800);
}

async function shots(page, theme) {
  const shot = (locator, name) => steadyScreenshot(locator, { path: path.join(artifacts, `sharing-${name}-${theme}.png`) });
  await shot(page.locator('.jp-GpuMagics-cards'), 'cards');
  await shot(row(page), 'cluster');
  await shot(page.locator('.jp-GpuMagics-holders'), 'memory');
  await shot(page.locator('#gpu-magics-panel'), 'panel');
}

async function freeCached(page) {
  await row(page).locator('button', { hasText: 'Free cached' }).click();
  await page.waitForFunction(
    name => {
      const splits = Array.from(
        document.querySelectorAll(`.jp-GpuMagics-cluster[data-cluster="${name}"] .jp-GpuMagics-split`)
      ).map(n => n.title);
      return splits.some(t => t.startsWith('2.0 GiB arrays \u00b7 0 B cached \u00b7 512 MiB context'));
    },
    CLUSTER,
    { timeout: 60000 }
  );
  check((await row(page).locator('.jp-GpuMagics-error').count()) === 0, 'the cluster says Free cached failed');
  step("Free cached on the cluster: the worker gave its 6.0 GiB back");
  await owner(page).locator('button', { hasText: 'Free cached' }).click();
  await page.waitForFunction(
    name => {
      const block = document.querySelector(`.jp-GpuMagics-owner[data-owner="${name}"]`);
      const splits = Array.from(block?.querySelectorAll('.jp-GpuMagics-split') ?? []).map(s => s.title);
      const freed = splits.some(t => t.startsWith('1.0 GiB arrays \u00b7 0 B cached \u00b7 512 MiB context'));
      return freed && block.querySelector('button')?.disabled;
    },
    notebook,
    { timeout: 60000 }
  );
  check((await owner(page).locator('.jp-GpuMagics-error').count()) === 0, 'the notebook says Free cached failed');
  step("Free cached on the notebook: its kernel gave its 10.0 GiB back");
  await checkCaps(
    page,
    [`GPU 0 \u00b7 2.5 GiB of its ${CAP} cap`, `GPU 1 \u00b7 1.5 GiB of its ${CAP} cap`],
    ['under', 'under'],
    [SERVER_CAP_TITLE, SERVER_CAP_TITLE]
  );
  await steadyScreenshot(page.locator('#gpu-magics-panel'), { path: path.join(artifacts, 'sharing-freed-dark.png') });
}

/**
 * The notebook lowers its own cap: the kernel's 1.5 GiB on GPU 1 is near it, and its worker's 2.5 GiB on GPU 0 is
 * over it (the kernel's record says the notebook's cap, the server gives it to every row of the notebook).
 */
async function notebookCap(page) {
  const said = await runNewCell(page, `%gpumemory --cap ${NOTEBOOK_CAP}`);
  step(`%gpumemory --cap ${NOTEBOOK_CAP}: ${said.trim()}`);
  const size = NOTEBOOK_CAP.replace(/([0-9.]+)\s*/, '$1 ');
  const title =
    `This notebook capped itself at ${size} a GPU (%gpumemory --cap); %gpumemory --cap off lifts it to the ` +
    `server\u2019s cap, if any. ${BINDS}`;
  await checkCaps(
    page,
    [`GPU 0 \u00b7 2.5 GiB: over its ${size} cap`, `GPU 1 \u00b7 1.5 GiB of its ${size} cap`],
    ['over', 'near'],
    [title, title]
  );
  for (const theme of ['dark', 'light']) {
    await setTheme(page, theme);
    await steadyScreenshot(page.locator('.jp-GpuMagics-holders'), {
      path: path.join(artifacts, `sharing-capped-${theme}.png`)
    });
  }
}

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1200, height: 1100 }, deviceScaleFactor: 2 });
  const errors = [];
  page.on('pageerror', error => errors.push(String(error)));
  page.on('console', message => {
    if (message.type() === 'error' && /gpu-magics/i.test(message.text())) {
      errors.push(message.text());
    }
  });
  try {
    await openPanelAndRunNotebook(page);
    for (const theme of ['light', 'dark']) {
      if (theme === 'dark') {
        await setTheme(page, 'dark');
      }
      await checkCards(page);
      await checkCluster(page);
      await checkMemory(page);
      await shots(page, theme);
    }
    await freeCached(page);
    await notebookCap(page);
    check(errors.length === 0, `errors in the page:\n${errors.join('\n')}`);
    step('passed');
  } catch (error) {
    await page.screenshot({ path: path.join(artifacts, 'sharing-failure.png') }).catch(() => undefined);
    throw error;
  } finally {
    await browser.close();
  }
}

main().catch(error => {
  console.error(`[sharing] FAILED: ${error.stack || error}`);
  process.exit(1);
});
