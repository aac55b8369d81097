/** SVG path data for a sparkline: values 0..max over a width x height box; NaN leaves a gap. */
export function sparklinePath(
  values: number[],
  width: number,
  height: number,
  max = 100
): string {
  if (values.length === 0 || max <= 0) {
    return '';
  }
  const step = values.length > 1 ? width / (values.length - 1) : 0;
  const parts: string[] = [];
  let drawing = false;
  values.forEach((value, i) => {
    if (!Number.isFinite(value)) {
      drawing = false;
      return;
    }
    const clamped = Math.min(max, Math.max(0, value));
    const x = values.length > 1 ? i * step : width;
    const y = height - (clamped / max) * height;
    parts.push(`${drawing ? 'L' : 'M'}${x.toFixed(1)},${y.toFixed(1)}`);
    drawing = true;
  });
  return parts.join(' ');
}
