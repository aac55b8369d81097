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

/** The time a chart covers, from its sample times (seconds): "last 45 s", "last 5 min"; "" before two samples. */
export function chartSpanLabel(times: number[]): string {
  if (times.length < 2) {
    return '';
  }
  const seconds = Math.max(0, Math.round((times[times.length - 1] ?? 0) - (times[0] ?? 0)));
  if (seconds < 90) {
    return `last ${seconds} s`;
  }
  if (seconds < 5400) {
    return `last ${Math.round(seconds / 60)} min`;
  }
  return `last ${(seconds / 3600).toFixed(1)} h`;
}
