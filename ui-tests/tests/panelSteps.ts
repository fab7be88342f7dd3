/** Steps the panel's specs share: running a given cell, counting what the page sends a kernel. */
import { IJupyterLabPageFixture } from '@jupyterlab/galata';

/**
 * Runs cell `index` of the active notebook. With `wait` false it returns once the cell is sent,
 * without waiting for it to end.
 */
export async function runCell(page: IJupyterLabPageFixture, index: number, wait = true): Promise<void> {
  await page.evaluate(
    async ([i, w]) => {
      const app = (window as any).jupyterapp;
      app.shell.currentWidget.content.activeCellIndex = i;
      const done = app.commands.execute('notebook:run-cell');
      if (w) {
        await done;
      }
    },
    [index, wait] as [number, boolean]
  );
}

/** The text of cell `index`'s output. */
export function cellOutput(page: IJupyterLabPageFixture, index: number) {
  return page
    .locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell')
    .nth(index)
    .locator('.jp-OutputArea-output');
}

/**
 * Starts counting the comm messages (comm_open, comm_msg) this page sends the active
 * notebook's kernel (KernelConnection.anyMessage, direction "send": @jupyterlab/services 7.6).
 */
export async function countCommMessagesSent(page: IJupyterLabPageFixture): Promise<void> {
  await page.evaluate(() => {
    const w = window as any;
    const kernel = w.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    w.__gpumemCommSent = 0;
    kernel.anyMessage.connect((_: unknown, args: any) => {
      const type = args.msg.header.msg_type;
      if (args.direction === 'send' && (type === 'comm_msg' || type === 'comm_open')) {
        w.__gpumemCommSent += 1;
      }
    });
  });
}

export function commMessagesSent(page: IJupyterLabPageFixture): Promise<number> {
  return page.evaluate(() => (window as any).__gpumemCommSent as number);
}

/**
 * The notebook `path` as saved on the server (its metadata), through the contents API. A read
 * that meets the file while the server writes it (jupyter_server 2.21 writes a notebook in place,
 * after a backup copy: services/contents/fileio.py atomic_writing; it answers 400 "Unreadable
 * Notebook" for the empty file of a save in progress) answers `'unreadable'`, so a poll reads again.
 */
export function savedMetadata(page: IJupyterLabPageFixture, path: string): Promise<any> {
  return page.evaluate(async p => {
    const app = (window as any).jupyterapp;
    try {
      const model = await app.serviceManager.contents.get(p, { content: true });
      return model.content.metadata.jupyter_gpumem ?? null;
    } catch (err) {
      if (String(err).includes('Unreadable Notebook')) {
        return 'unreadable';
      }
      throw err;
    }
  }, path);
}
