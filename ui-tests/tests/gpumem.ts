/** Helpers shared by the jupyter-gpumem browser specs. */
import * as path from 'path';
import { expect, IJupyterLabPageFixture } from '@jupyterlab/galata';
import { Locator } from '@playwright/test';

export const PANEL_ID = 'jupyter-gpumem-panel';
export const NOTEBOOKS_DIR = path.resolve(__dirname, '..', 'notebooks');
export const IMAGES_DIR = path.resolve(__dirname, '..', '..', 'docs', 'images');

/**
 * Galata's kernel tracker answers every POST under /api/kernels, a restart included, with
 * 201; JupyterLab accepts only 200 for a restart ("Invalid response: 201 Created") and the
 * kernel stays "restarting". Specs that restart kernels turn the tracker off (`kernels: null`);
 * their kernels are still shut down with their sessions, which galata keeps tracking.
 */
export const NO_KERNEL_TRACKER = { kernels: null } as const;

/**
 * Answers the page's device readings with `reply` instead of the server: pushed on the
 * /devices/ws socket as the server does on opening, and on GET /devices (the polling fallback).
 * Call before the page loads (`autoGoto: false`, then `page.goto()`): only sockets made after
 * routing are routed.
 */
export async function serveDevices(page: IJupyterLabPageFixture, reply: unknown): Promise<void> {
  await page.routeWebSocket(/\/jupyter-gpumem\/api\/devices\/ws(\?|$)/, ws => ws.send(JSON.stringify(reply)));
  await page.route('**/jupyter-gpumem/api/devices*', route => route.fulfill({ json: reply }));
}

/** Opens the GPU memory sidebar and returns its node. */
export async function openPanel(page: IJupyterLabPageFixture): Promise<Locator> {
  await page.sidebar.openTab(PANEL_ID);
  const panel = page.locator(`#${PANEL_ID}`);
  await panel.waitFor({ state: 'visible' });
  return panel;
}

/**
 * Uploads notebooks/<name> into the test's folder (galata's tmpPath) as `as`, opens it and
 * waits for its kernel.
 */
export async function openNotebook(
  page: IJupyterLabPageFixture,
  tmpPath: string,
  name: string,
  as: string = name
): Promise<void> {
  await page.contents.uploadFile(path.join(NOTEBOOKS_DIR, name), `${tmpPath}/${as}`);
  await page.notebook.openByPath(`${tmpPath}/${as}`);
  await page.notebook.activate(as);
  await waitForKernelIdle(page);
}

/**
 * Fails if `view` shows the test's own folder (galata's `tmpPath`, where openNotebook uploads
 * each test's notebooks): a view kept as a screenshot shows a notebook's name, not where the
 * test put it.
 */
export async function expectNoTestFolderShown(view: Locator, tmpPath: string): Promise<void> {
  expect(await view.innerText()).not.toContain(tmpPath);
}

/** The jupyter_gpumem metadata of the active notebook, read from the app. */
export function notebookMetadata(page: IJupyterLabPageFixture): Promise<any> {
  return page.evaluate(() => {
    const app = (window as any).jupyterapp;
    const nb = app.shell.currentWidget;
    return nb.context.model.getMetadata('jupyter_gpumem') ?? null;
  });
}

/** Sets the active notebook's jupyter_gpumem metadata, as a notebook saved with it has. */
export async function setNotebookMetadata(page: IJupyterLabPageFixture, value: unknown): Promise<void> {
  await page.evaluate(v => {
    const app = (window as any).jupyterapp;
    app.shell.currentWidget.context.model.setMetadata('jupyter_gpumem', v);
  }, value);
}

/** Runs `code` in the active notebook's kernel, out of its history, and parses what it printed as JSON. */
function askKernelJson(page: IJupyterLabPageFixture, code: string): Promise<any> {
  return page.evaluate(async (source: string) => {
    const app = (window as any).jupyterapp;
    const kernel = app.shell.currentWidget.sessionContext.session.kernel;
    const future = kernel.requestExecute({ code: source, store_history: false });
    let out = '';
    future.onIOPub = (msg: any) => {
      if (msg.header.msg_type === 'stream') {
        out += msg.content.text;
      }
    };
    await future.done;
    return JSON.parse(out);
  }, code);
}

/**
 * The allocator names the active notebook's kernel reports in its snapshot (null when it does
 * not know them), asked of the kernel directly.
 */
export function kernelAllocatorChoices(page: IJupyterLabPageFixture): Promise<string[] | null> {
  return askKernelJson(
    page,
    'import json\nfrom jupyter_gpumem.kernel import comm as kernel_comm\n' +
      "print(json.dumps(kernel_comm.snapshot().get('allocator_choices')))"
  );
}

/**
 * Asked of the active notebook's kernel directly: whether jupyter_gpumem is loaded as an IPython
 * extension, and whether JAX's backend has started (jupyter_gpumem/sources/jax_backend.py's
 * probe, which never imports jax; a kernel without jax imported has not started it).
 */
export function kernelLoadState(page: IJupyterLabPageFixture): Promise<{ loaded: boolean; jaxStarted: boolean }> {
  return askKernelJson(
    page,
    "print(__import__('json').dumps({'loaded': 'jupyter_gpumem' in get_ipython().extension_manager.loaded, " +
      "'jaxStarted': 'jax' in __import__('sys').modules and " +
      "__import__('jupyter_gpumem.sources.jax_backend', fromlist=['_']).backend_started()}))"
  );
}

/** Waits until the active notebook's kernel is connected and idle. */
export async function waitForKernelIdle(page: IJupyterLabPageFixture): Promise<void> {
  await page.waitForFunction(() => {
    const app = (window as any).jupyterapp;
    const kernel = app.shell.currentWidget?.sessionContext?.session?.kernel;
    return kernel && kernel.status === 'idle' && kernel.connectionStatus === 'connected';
  });
}

/**
 * Does `action` and waits until the active notebook's kernel has restarted in place (same
 * kernel id, status "restarting" seen) and is connected and idle again (a restart begins
 * asynchronously after a click).
 */
export async function withKernelRestart(
  page: IJupyterLabPageFixture,
  action: () => Promise<void>
): Promise<void> {
  await page.evaluate(() => {
    const w = window as any;
    const kernel = w.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    w.__gpumemRestarted = false;
    w.__gpumemOldKernel = kernel.id;
    kernel.statusChanged.connect((_: unknown, status: string) => {
      if (status === 'restarting' || status === 'autorestarting') {
        w.__gpumemRestarted = true;
      }
    });
  });
  await action();
  await page.waitForFunction(() => {
    const w = window as any;
    const kernel = w.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel;
    return (
      kernel &&
      w.__gpumemRestarted &&
      kernel.id === w.__gpumemOldKernel &&
      kernel.status === 'idle' &&
      kernel.connectionStatus === 'connected'
    );
  });
}

/** Runs the active notebook's first cell and returns a locator for its output. */
export async function runFirstCell(page: IJupyterLabPageFixture): Promise<Locator> {
  await page.evaluate(async () => {
    const app = (window as any).jupyterapp;
    app.shell.currentWidget.content.activeCellIndex = 0;
    await app.commands.execute('notebook:run-cell');
  });
  return page
    .locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell')
    .first()
    .locator('.jp-OutputArea-output');
}
