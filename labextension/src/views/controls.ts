/** The small controls the panel's views share: a button, an in-app link, a bar filled to a percentage. */
import { el } from './dom';
import { formatBytes } from '../format';

/** A panel button: `enabled` false disables it; `attrs` may add classes or a title. */
export function button(
  label: string,
  enabled: boolean,
  onClick: () => void,
  attrs: Record<string, string> = {}
): HTMLButtonElement {
  const node = el('button', { class: 'jp-GpuMagics-button', type: 'button', ...attrs }, label);
  node.disabled = !enabled;
  node.addEventListener('click', onClick);
  return node;
}

/** A link that runs `onClick` in the app instead of following an address. */
export function link(text: string, onClick: () => void): HTMLElement {
  const a = el('a', { class: 'jp-GpuMagics-link', href: '#' }, text);
  a.addEventListener('click', event => {
    event.preventDefault();
    onClick();
  });
  return a;
}

/** The fill of a bar: `percent` (null as 0) clamped to 0-100. */
export function barFill(percent: number | null): HTMLElement {
  const fill = el('div', { class: 'jp-GpuMagics-barFill' });
  fill.style.width = `${Math.min(100, Math.max(0, percent ?? 0)).toFixed(1)}%`;
  return fill;
}

/**
 * What a process says it holds, three ways, as a small grid: each figure over its name ("1.0 GiB" over "arrays"),
 * only those it says; `null` when it says none. The tooltip gives them in one line.
 */
export function splitView(
  arrays: number | null | undefined,
  cached: number | null | undefined,
  context: number | null | undefined,
  title: string,
  className = ''
): HTMLElement | null {
  const parts: [number | null | undefined, string][] = [
    [arrays, 'arrays'],
    [cached, 'cached'],
    [context, 'context']
  ];
  const known = parts.filter(([value]) => value !== null && value !== undefined) as [number, string][];
  if (known.length === 0) {
    return null;
  }
  return el(
    'div',
    { class: `jp-GpuMagics-split ${className}`.trim(), title },
    ...known.map(([value, name]) =>
      el(
        'span',
        { class: 'jp-GpuMagics-part', 'data-part': name, ...(value > 0 ? { 'data-some': '' } : {}) },
        el('span', { class: 'jp-GpuMagics-num' }, formatBytes(value)),
        el('span', { class: 'jp-GpuMagics-partName' }, name)
      )
    )
  );
}
