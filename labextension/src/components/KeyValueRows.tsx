/** The body of a two-column table: one row per [name, value]. */

import * as React from 'react';

export function KeyValueRows(props: { rows: Array<[string, string]> }): JSX.Element {
  return (
    <tbody>
      {props.rows.map(([name, value]) => (
        <tr key={name}>
          <th>{name}</th>
          <td>{value}</td>
        </tr>
      ))}
    </tbody>
  );
}
