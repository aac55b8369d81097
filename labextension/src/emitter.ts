/** A minimal change notifier, so the model needs no JupyterLab import (and runs under jest as is). */
export class Emitter<T> {
  private _listeners = new Set<(value: T) => void>();

  connect(listener: (value: T) => void): () => void {
    this._listeners.add(listener);
    return () => this._listeners.delete(listener);
  }

  emit(value: T): void {
    for (const listener of Array.from(this._listeners)) {
      listener(value);
    }
  }

  clear(): void {
    this._listeners.clear();
  }
}
