import { LabIcon } from '@jupyterlab/ui-components';

// A memory chip; jp-icon3 makes it follow the theme's icon colour.
const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
<g class="jp-icon3" fill="#616161">
<path d="M5 6h14a1 1 0 0 1 1 1v8a1 1 0 0 1-1 1H5a1 1 0 0 1-1-1V7a1 1 0 0 1 1-1zm1 2v6h3V8zm4.5 0v6h3V8zM15 8v6h3V8z"/>
<path d="M6 17h1.5v3H6zm3.5 0H11v3H9.5zm3.5 0h1.5v3H13zm3.5 0H18v3h-1.5zM6 2h1.5v3H6zm3.5 0H11v3H9.5zM13 2h1.5v3H13zm3.5 0H18v3h-1.5z"/>
</g></svg>`;

export const gpuMemIcon = new LabIcon({ name: 'jupyter-gpumem:icon', svgstr: svg });
