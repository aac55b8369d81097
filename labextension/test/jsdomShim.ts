/** What jsdom lacks and @lumino/widgets needs at import (@lumino/dragdrop subclasses DragEvent): import it first. */
if (typeof globalThis.DragEvent === 'undefined') {
  class DragEventShim extends MouseEvent {
    readonly dataTransfer: DataTransfer | null = null;
  }
  (globalThis as { DragEvent?: unknown }).DragEvent = DragEventShim;
}

export {};
