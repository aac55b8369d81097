/**
 * Human-readable values; `null` (not supported or unreadable) reads as an en dash.
 *
 * Bytes are in binary units (B, KiB, MiB, GiB, TiB), as NVML reports them.
 * The notebook displays follow the same rules (gpu_magics/display/format.py);
 * tests/data/format_cases.json pins both.
 */

const DASH = '\u2013';
const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function formatBytes(bytes: number | null): string {
  if (bytes === null || !Number.isFinite(bytes)) {
    return DASH;
  }
  let value = Math.abs(bytes);
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const digits = unit === 0 || value >= 100 ? 0 : 1;
  return `${bytes < 0 ? '-' : ''}${value.toFixed(digits)} ${UNITS[unit]}`;
}

/** Bytes per second: "1.2 GiB/s", "0 B/s"; an en dash when unknown. */
export function formatRate(bytesPerSecond: number | null): string {
  return bytesPerSecond === null ? DASH : `${formatBytes(bytesPerSecond)}/s`;
}

export function formatPercent(value: number | null): string {
  return value === null || !Number.isFinite(value)
    ? DASH
    : `${Math.round(value)}%`;
}

export function formatNumber(value: number | null, unit: string): string {
  return value === null || !Number.isFinite(value)
    ? DASH
    : `${Math.round(value)} ${unit}`;
}

/** Memory in use as a percentage of the total, or `null` when either is unknown. */
export function memoryPercent(
  used: number | null,
  total: number | null
): number | null {
  if (used === null || total === null || total <= 0) {
    return null;
  }
  return (100 * used) / total;
}

/** "3 s", "5 min", "2 h" ago, for a cluster's start time (seconds since the epoch). */
export function formatAge(startedAt: number, nowSeconds: number): string {
  const seconds = Math.max(0, Math.round(nowSeconds - startedAt));
  if (seconds < 60) {
    return `${seconds} s`;
  }
  if (seconds < 3600) {
    return `${Math.round(seconds / 60)} min`;
  }
  return `${(seconds / 3600).toFixed(1)} h`;
}

/** A timeout or the time left on it: "45 s", "30 min", "1 h 30 min" (as format_duration in Python). */
export function formatDuration(seconds: number): string {
  const whole = Math.max(0, Math.round(seconds));
  if (whole < 60) {
    return `${whole} s`;
  }
  const minutes = Math.round(whole / 60);
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const rest = minutes % 60;
  return `${Math.floor(minutes / 60)} h${rest ? ` ${rest} min` : ''}`;
}

// -- compact pairs for the side panel's narrow cards (panel only; the notebook displays do not use them) --

/** "67.2/140 GiB": the used part in the total's unit, so the pair stays short; an en dash where unknown. */
export function formatBytesPair(used: number | null, total: number | null): string {
  if (total === null || !Number.isFinite(total) || total <= 0) {
    return used === null ? DASH : formatBytes(used);
  }
  const totalText = formatBytes(total);
  const unit = UNITS.indexOf(totalText.split(' ')[1] ?? 'B');
  if (used === null || !Number.isFinite(used)) {
    return `${DASH}/${totalText}`;
  }
  const value = used / 1024 ** unit;
  const digits = unit === 0 || Math.abs(value) >= 100 ? 0 : 1;
  return `${value.toFixed(digits)}/${totalText}`;
}

/** "283/700 W", or "283 W" without a limit. */
export function formatNumberPair(value: number | null, limit: number | null, unit: string): string {
  if (limit === null || !Number.isFinite(limit)) {
    return formatNumber(value, unit);
  }
  const valueText = value === null || !Number.isFinite(value) ? DASH : String(Math.round(value));
  return `${valueText}/${Math.round(limit)} ${unit}`;
}
