// Copy buttons: shown only where the script runs, since the key is on the
// page for anyone to select without it.
document.querySelectorAll("button.copy").forEach((button) => {
  button.hidden = false;
  button.addEventListener("click", async () => {
    const text = document.getElementById(button.dataset.copy).textContent;
    await navigator.clipboard.writeText(text);
    button.textContent = "Copied";
  });
});

// The before/after slider: the result is clipped to the slider's right.
const slider = document.getElementById("slider");
const after = document.getElementById("after");
if (slider && after) {
  slider.hidden = false;
  document.getElementById("compare").classList.add("sliding");
  const clip = () => { after.style.clipPath = `inset(0 0 0 ${slider.value}%)`; };
  slider.addEventListener("input", clip);
  clip();
}

// Try it's drop zone: a file dropped on it is chosen, as the file input
// would choose it (the input alone works without the script).
const drop = document.getElementById("drop");
const file = document.getElementById("image");
if (drop && file) {
  document.getElementById("drop-hint").hidden = false;
  drop.addEventListener("dragover", (event) => {
    event.preventDefault(); // else the browser opens the file instead
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    const dropped = event.dataTransfer.files[0];
    if (dropped) {
      const one = new DataTransfer(); // the input takes one file; a drop may bring several
      one.items.add(dropped);
      file.files = one.files;
    }
  });
}
