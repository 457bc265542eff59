"""Managed resource kinds. Each module offers pure ``desired``/``observe``/``diff`` functions and a small
side-effecting ``apply``; :mod:`.registry` lists them in the order the engine applies them."""
