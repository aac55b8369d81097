/** A fixed-capacity ring of numbers: memory stays bounded however long the panel stays open. */
export class Ring {
  private _data: Float64Array;
  private _start = 0;
  private _size = 0;

  constructor(readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new Error(`capacity must be a positive integer, got ${capacity}`);
    }
    this._data = new Float64Array(capacity);
  }

  get size(): number {
    return this._size;
  }

  /** Append; `null` is kept as NaN (a gap in the chart). */
  push(value: number | null): void {
    const v = value === null || !Number.isFinite(value) ? NaN : value;
    if (this._size < this.capacity) {
      this._data[(this._start + this._size) % this.capacity] = v;
      this._size += 1;
    } else {
      this._data[this._start] = v;
      this._start = (this._start + 1) % this.capacity;
    }
  }

  /** The values, oldest first. */
  values(): number[] {
    const out: number[] = new Array(this._size);
    for (let i = 0; i < this._size; i++) {
      out[i] = this._data[(this._start + i) % this.capacity] as number;
    }
    return out;
  }

  clear(): void {
    this._start = 0;
    this._size = 0;
  }
}
