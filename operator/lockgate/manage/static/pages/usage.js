export async function render(view) {
  view.append("Usage");
}
