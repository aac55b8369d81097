// An nbconvert HTML export in Chromium, no server and no kernel: check the magics' outputs show (not a widget
// placeholder) and screenshot them. Usage: node export_view.mjs EXPORT.html
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { launch } from './chromium.mjs';

const [file] = process.argv.slice(2);
const artifacts = process.env.ARTIFACTS || 'test-artifacts';

async function main() {
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  const problems = [];
  try {
    await page.goto(pathToFileURL(path.resolve(file)).href);
    for (const [selector, name, text] of [
      ['.gpu-magics-monitor', 'monitor', 'stopped'],
      ['.gpu-magics-run', 'run', 'cpu-threads'],
      ['.gpu-magics-compare', 'compare', 'Skipped']
    ]) {
      const target = page.locator(selector).first();
      const content = (await target.textContent({ timeout: 30000 }).catch(() => '')) || '';
      if (!content.includes(text)) problems.push(`${selector} does not show "${text}" in the export`);
      else await target.screenshot({ path: path.join(artifacts, `export-${name}.png`) });
    }
  } finally {
    await browser.close();
  }
  if (problems.length) {
    console.log(`[export] FAILED: ${problems.join('; ')}`);
    process.exit(1);
  }
  console.log('[export] the outputs show in the HTML export');
}

main().catch(error => {
  console.error(error);
  process.exit(1);
});
