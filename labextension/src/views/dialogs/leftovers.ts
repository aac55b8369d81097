/** The dialog that asks before "End them" ends what a kernel that has ended left on a GPU. */
import { Dialog, showDialog } from '@jupyterlab/apputils';

import type { ILeftoverGroup } from '../../model/panelModel';
import { LISTED, processTexts } from '../sections/leftovers';

export async function confirmEndLeftovers(group: ILeftoverGroup): Promise<boolean> {
  const count = new Set(group.processes.map(p => p.pid)).size;
  const named = processTexts(group);
  const listed = named.slice(0, LISTED).join(' \u00b7 ') + (named.length > LISTED ? ` and ${named.length - LISTED} more` : '');
  const result = await showDialog({
    title: count === 1 ? `End the process left on ${group.gpuLabel}?` : `End the ${count} processes left on ${group.gpuLabel}?`,
    body:
      `${count === 1 ? 'Its' : 'Their'} kernel has ended: ${listed}. Each gets SIGTERM, then SIGKILL if it does not stop, ` +
      'only where its pid still names the process the kernel started and it is yours; what it held is lost.',
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'End them' })]
  });
  return result.button.accept;
}
