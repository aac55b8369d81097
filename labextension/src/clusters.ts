/**
 * Cluster buttons act through the kernel that started the cluster: the panel runs `%gpucluster ...` there,
 * so that kernel stays the cluster's one owner.
 */
import type { Kernel, KernelMessage } from '@jupyterlab/services';

export type ClusterAction =
  | { action: 'stop' }
  | { action: 'restart' }
  | { action: 'scale'; workers: number };

/** The magic line for an action (validated: a scale needs a whole number of workers >= 1). */
export function clusterCommand(request: ClusterAction): string {
  switch (request.action) {
    case 'stop':
      return '%gpucluster stop';
    case 'restart':
      return '%gpucluster restart';
    case 'scale':
      if (!Number.isInteger(request.workers) || request.workers < 1) {
        throw new Error('scale needs a whole number of workers, at least 1');
      }
      return `%gpucluster scale ${request.workers}`;
  }
}

/** Run `code` silently in the running kernel `kernelId`; rejects with the kernel's error, if any. */
export async function runInKernel(
  kernels: Kernel.IManager,
  kernelId: string,
  code: string
): Promise<void> {
  await kernels.refreshRunning();
  const model = Array.from(kernels.running()).find(k => k.id === kernelId);
  if (model === undefined) {
    throw new Error(
      'The kernel that started this cluster is not running on this server.'
    );
  }
  const kernel = kernels.connectTo({ model, handleComms: false });
  try {
    const future = kernel.requestExecute({
      code,
      silent: true,
      store_history: false,
      stop_on_error: false
    });
    const reply = (await future.done) as KernelMessage.IExecuteReplyMsg;
    const content = reply.content;
    if (content.status === 'error') {
      throw new Error(`${content.ename}: ${content.evalue}`);
    }
    if (content.status !== 'ok') {
      throw new Error(`the kernel answered ${content.status}`);
    }
  } finally {
    kernel.dispose();
  }
}
