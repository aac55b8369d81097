/** Reconnection delays: exponential from `initial` to `max` milliseconds, with jitter; reset on success. */
export class Backoff {
  private _attempt = 0;

  constructor(
    readonly initial = 1000,
    readonly max = 30000,
    private readonly _random: () => number = Math.random
  ) {}

  get attempt(): number {
    return this._attempt;
  }

  /** The delay before the next try; each call counts one more failed attempt. */
  next(): number {
    const base = Math.min(this.max, this.initial * 2 ** this._attempt);
    this._attempt += 1;
    // Between 75% and 100% of the base, so that many panels do not reconnect in lock step.
    return Math.round(base * (0.75 + 0.25 * this._random()));
  }

  reset(): void {
    this._attempt = 0;
  }
}
