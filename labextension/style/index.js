import './base.css';
import './leftovers.css';
