/** Reading and writing a notebook's metadata.jupyter_gpumem. */

import { NotebookPanel } from '@jupyterlab/notebook';

import { metadataWithSettings, ParsedSettings, parseSettings } from './allocatorSettings';
import { METADATA_KEY } from './constants';
import { NotebookAllocatorSettings } from './types';

export function readNotebookSettings(panel: NotebookPanel): ParsedSettings {
  const model = panel.context.model;
  return parseSettings(model ? model.getMetadata(METADATA_KEY) : undefined);
}

export function writeNotebookSettings(panel: NotebookPanel, s: NotebookAllocatorSettings): void {
  const model = panel.context.model;
  model.setMetadata(METADATA_KEY, metadataWithSettings(model.getMetadata(METADATA_KEY), s));
}
